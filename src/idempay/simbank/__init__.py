"""The channel simulator (`idempay simbank`): a bank over HTTP with its own ledger, request_id
idempotency, signed callbacks, daily statements and fault injection (docs/simbank.md)."""
