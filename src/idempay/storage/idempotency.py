"""The Idempotency-Key records (table `idempotency_keys`): claim inside the resource's
transaction, answer, replay, expire. SQLAlchemy Core, the same on every dialect."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, delete, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from idempay.domain.errors import DuplicateKey
from idempay.domain.ports import IdempotencyRecord, Tx
from idempay.storage import tables as t
from idempay.storage.store import SqlStore, SqlTx

_COLS = [f.name for f in fields(IdempotencyRecord)]
_k = t.idempotency_keys
_c = _k.c
# built once: every keyed request runs these (a statement built per call costs as much CPU as
# running it)
_GET = select(_k).where(_c.merchant_id == bindparam("m"), _c.key == bindparam("k"))
_INSERT = insert(_k)
_COMPLETE = (
    update(_k)
    .where(_c.merchant_id == bindparam("m"), _c.key == bindparam("k"), _c.response_status.is_(None))
    .values(response_status=bindparam("v_status"), response_body=bindparam("v_body"))
)


def _record(row: Row[Any]) -> IdempotencyRecord:
    m = row._mapping
    return IdempotencyRecord(**{c: m[c] for c in _COLS})


def _params(record: IdempotencyRecord) -> dict[str, Any]:
    return {c: getattr(record, c) for c in _COLS}


def _conn(tx: Tx) -> AsyncConnection:
    if not isinstance(tx, SqlTx):  # pragma: no cover - only SqlStore transactions exist
        raise TypeError(f"an idempotency record needs a SqlTx, got {type(tx).__name__}")
    return tx.conn


class SqlIdempotencyRecords:
    """The IdempotencyRecords port. The primary key (merchant_id, key) is the arbiter: of many
    concurrent first uses of one key, exactly one insert succeeds."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    async def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        async with self.store.reads.connect() as conn:
            row = (await conn.execute(_GET, {"m": merchant_id, "k": key})).first()
        return _record(row) if row else None

    async def claim(self, tx: Tx, record: IdempotencyRecord) -> None:
        try:
            await _conn(tx).execute(_INSERT, _params(record))
        except IntegrityError as e:
            raise DuplicateKey("idempotency_key") from e

    async def complete(self, merchant_id: str, key: str, status: int, body: str) -> bool:
        params = {"m": merchant_id, "k": key, "v_status": status, "v_body": body}
        async with self.store.standalone() as conn:
            return bool((await conn.execute(_COMPLETE, params)).rowcount == 1)

    async def remember(self, record: IdempotencyRecord) -> bool:
        try:
            async with self.store.standalone() as conn:
                await conn.execute(_INSERT, _params(record))
        except IntegrityError:
            return False
        return True

    async def forget_expired(self, merchant_id: str, key: str, now: datetime) -> None:
        stmt = delete(_k).where(_c.merchant_id == merchant_id, _c.key == key, _c.expires_at <= now)
        async with self.store.standalone() as conn:
            await conn.execute(stmt)

    async def purge_expired(self, now: datetime, limit: int) -> int:
        due = select(_c.merchant_id, _c.key).where(_c.expires_at <= now).limit(limit)
        async with self.store.begin() as tx:
            conn = tx.conn
            keys = [(r.merchant_id, r.key) for r in (await conn.execute(due)).all()]
            if keys:
                due_keys = tuple_(_c.merchant_id, _c.key).in_(keys)
                await conn.execute(delete(_k).where(due_keys, _c.expires_at <= now))
        return len(keys)
