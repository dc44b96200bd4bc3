"""`idempay demo`: the whole system on the embedded default, under faults, vs naive retrying."""
