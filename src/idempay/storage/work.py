"""Work queues for the worker: claiming due instructions and outbox events with a lease.

PostgreSQL and MariaDB: `FOR UPDATE SKIP LOCKED` plus a lease, so many workers share the work
and never hold the same item at once. SQLite: write transactions are serialised (BEGIN
IMMEDIATE), so the lease alone does the same job.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, case, exists, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from idempay.domain.model import Instruction
from idempay.domain.states import LIVE_INSTRUCTION, InstructionStatus
from idempay.storage import tables as t
from idempay.storage.store import SqlStore, to_instruction


def _lockable(q: Select[Any], conn: AsyncConnection) -> Select[Any]:
    return q if conn.dialect.name == "sqlite" else q.with_for_update(skip_locked=True)


async def claim_instructions(
    store: SqlStore,
    *,
    worker: str,
    lease_s: float,
    limit: int,
    sweep_before: datetime | None = None,
    favour: list[str] | None = None,
) -> list[Instruction]:
    """Lease up to `limit` due live instructions, largest amounts first, then oldest.

    Due: `next_query_at` has passed, or (`sweep_before` given) it is UNKNOWN/PROCESSING and has
    not been touched since then — a starting worker looks at every open question once.
    """
    now = store.clock.now()
    c = t.instructions.c
    due = c.next_query_at <= now
    if sweep_before is not None:
        swept = and_(c.status != InstructionStatus.PENDING.value, c.updated_at < sweep_before)
        due = or_(due, swept)
    q = (
        select(t.instructions)
        .where(
            c.status.in_([s.value for s in LIVE_INSTRUCTION]),
            due,
            or_(c.lease_until.is_(None), c.lease_until < now),
        )
        .order_by(*_favoured(favour), c.amount.desc(), c.created_at, c.request_id)
        .limit(limit)
    )
    async with store.begin() as tx:
        rows = (await tx.conn.execute(_lockable(q, tx.conn))).all()
        if not rows:
            return []
        ids = [r.request_id for r in rows]
        until = now + timedelta(seconds=lease_s)
        stmt = update(t.instructions).where(c.request_id.in_(ids))
        await tx.conn.execute(stmt.values(lease_owner=worker, lease_until=until, updated_at=now))
    claimed = [to_instruction(r) for r in rows]
    return [_with_lease(i, worker, until) for i in claimed]


def _favoured(merchants: list[str] | None) -> list[Any]:
    """Merchants with many unresolved instructions go first (seeds/001)."""
    if not merchants:
        return []
    return [case((t.instructions.c.merchant_id.in_(merchants), 0), else_=1)]


async def unknown_rates(store: SqlStore, since: datetime) -> dict[str, float]:
    c = t.instructions.c
    live = case((c.status.in_([s.value for s in LIVE_INSTRUCTION]), 1), else_=0)
    q = select(c.merchant_id, func.sum(live), func.count()).where(c.created_at >= since)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(q.group_by(c.merchant_id))).all()
    return {m: float(n_live or 0) / n for m, n_live, n in rows if n}


def _with_lease(i: Instruction, worker: str, until: datetime) -> Instruction:
    return replace(i, lease_owner=worker, lease_until=until)


async def claim_events(store: SqlStore, *, lease_s: float, limit: int) -> list[dict[str, Any]]:
    """Lease due outbox events, oldest first, never one whose object has an older event still
    undelivered (in order per payment)."""
    now = store.clock.now()
    o, older = t.outbox, t.outbox.alias("older")
    blocked = exists().where(
        older.c.object_id == o.c.object_id, older.c.seq < o.c.seq, older.c.status == "PENDING"
    )
    q = (
        select(o, t.merchants.c.api_key_hash)
        .join(t.merchants, t.merchants.c.id == o.c.merchant_id)
        .where(
            o.c.status == "PENDING",
            o.c.next_attempt_at <= now,
            or_(o.c.lease_until.is_(None), o.c.lease_until < now),
            ~blocked,
        )
        .order_by(o.c.seq)
        .limit(limit)
    )
    async with store.begin() as tx:
        locked = (
            q if tx.conn.dialect.name == "sqlite" else q.with_for_update(of=o, skip_locked=True)
        )
        rows = [dict(r._mapping) for r in (await tx.conn.execute(locked)).all()]
        if rows:
            until = now + timedelta(seconds=lease_s)
            stmt = update(o).where(o.c.seq.in_([r["seq"] for r in rows]))
            await tx.conn.execute(stmt.values(lease_until=until))
    return rows


async def finish_event(
    store: SqlStore,
    seq: int,
    *,
    status: str,
    attempts: int,
    error: str | None,
    next_attempt_at: datetime | None,
) -> None:
    now = store.clock.now()
    values: dict[str, Any] = {
        "status": status,
        "attempts": attempts,
        "last_error": error,
        "lease_until": None,
        "next_attempt_at": next_attempt_at,
    }
    if status == "DELIVERED":
        values["delivered_at"] = now
    async with store.standalone() as conn:
        await conn.execute(update(t.outbox).where(t.outbox.c.seq == seq).values(**values))


async def skip_events(store: SqlStore, seqs: list[int], *, error: str) -> int:
    """Mark PENDING events SKIPPED (nowhere to deliver them) in one statement, their attempts
    unchanged: what `finish_event(seq, status="SKIPPED", ...)` does to each. The number marked."""
    if not seqs:
        return 0
    o = t.outbox.c
    stmt = (
        update(t.outbox)
        .where(o.seq.in_(seqs), o.status == "PENDING")
        .values(status="SKIPPED", last_error=error, lease_until=None, next_attempt_at=None)
    )
    async with store.standalone() as conn:
        return int((await conn.execute(stmt)).rowcount)


class SqlWorkQueue:
    """The WorkQueue port over the functions above."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    async def claim_instructions(
        self,
        *,
        worker: str,
        lease_s: float,
        limit: int,
        sweep_before: datetime | None = None,
        favour: list[str] | None = None,
    ) -> list[Instruction]:
        return await claim_instructions(
            self.store,
            worker=worker,
            lease_s=lease_s,
            limit=limit,
            sweep_before=sweep_before,
            favour=favour,
        )

    async def unknown_rates(self, since: datetime) -> dict[str, float]:
        return await unknown_rates(self.store, since)

    async def claim_events(self, *, lease_s: float, limit: int) -> list[dict[str, Any]]:
        return await claim_events(self.store, lease_s=lease_s, limit=limit)

    async def finish_event(
        self,
        seq: int,
        *,
        status: str,
        attempts: int,
        error: str | None,
        next_attempt_at: datetime | None,
    ) -> None:
        await finish_event(
            self.store,
            seq,
            status=status,
            attempts=attempts,
            error=error,
            next_attempt_at=next_attempt_at,
        )

    async def skip_events(self, seqs: list[int], *, error: str) -> int:
        return await skip_events(self.store, seqs, error=error)
