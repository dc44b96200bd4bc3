"""The portable queries, including the one compare-and-set transition every status change uses."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    LABEL_STYLE_TABLENAME_PLUS_COL,
    Row,
    Table,
    and_,
    bindparam,
    case,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from idempay.domain import states
from idempay.domain.errors import DuplicateKey
from idempay.domain.model import Instruction, Payment, PaymentView, Principal, new_id
from idempay.domain.ports import Change, Clock, Discrepancy
from idempay.domain.states import LIVE_INSTRUCTION, Entity
from idempay.storage import sqlite
from idempay.storage import tables as t
from idempay.storage.balances import BalancesStore, BalancesTx
from idempay.storage.sqlite import WRITE_OPTION

TABLES: dict[Entity, tuple[Table, str]] = {
    Entity.PAYMENT: (t.payments, "id"),
    Entity.INSTRUCTION: (t.instructions, "request_id"),
    Entity.REFUND: (t.refunds, "id"),
    Entity.SPLIT: (t.splits, "id"),
    Entity.SPLIT_ITEM: (t.split_items, "id"),
}

_PAYMENT_COLS = [f.name for f in fields(Payment)]
_INSTRUCTION_COLS = [f.name for f in fields(Instruction)]


# A payment with its instructions, oldest attempt first, in one query: `payments_<col>` and
# `instructions_<col>` per row, the instruction columns NULL for a payment without any.
_VIEW = (
    select(t.payments, t.instructions)
    .select_from(
        t.payments.outerjoin(
            t.instructions,
            and_(
                t.instructions.c.payment_id == t.payments.c.id,
                t.instructions.c.owner_kind == Entity.PAYMENT.value,
            ),
        )
    )
    .set_label_style(LABEL_STYLE_TABLENAME_PLUS_COL)
    .order_by(t.instructions.c.attempt, t.instructions.c.created_at)
)
_VIEW_BY_BIZ_NO = _VIEW.where(
    t.payments.c.merchant_id == bindparam("merchant_id"),
    t.payments.c.biz_no == bindparam("biz_no"),
)
_VIEW_BY_ID = _VIEW.where(t.payments.c.id == bindparam("payment_id"))


def to_view(rows: Sequence[Row[Any]]) -> PaymentView | None:
    if not rows:
        return None
    first = rows[0]._mapping
    payment = Payment(**{c: first[f"payments_{c}"] for c in _PAYMENT_COLS})
    instructions = tuple(
        Instruction(**{c: m[f"instructions_{c}"] for c in _INSTRUCTION_COLS})
        for m in (r._mapping for r in rows)
        if m["instructions_request_id"] is not None
    )
    return PaymentView(payment, instructions)


def to_payment(row: Row[Any]) -> Payment:
    m = row._mapping
    return Payment(**{c: m[c] for c in _PAYMENT_COLS})


def to_instruction(row: Row[Any]) -> Instruction:
    m = row._mapping
    return Instruction(**{c: m[c] for c in _INSTRUCTION_COLS})


_INSERT_PAYMENT = insert(t.payments)
_INSERT_INSTRUCTION = insert(t.instructions)
_INSERT_TRANSITIONS = insert(t.transitions)
_INSERT_EVENTS = insert(t.outbox)


@functools.cache
def _cas(
    entity: Entity, guard: tuple[tuple[str, bool], ...], values: tuple[str, ...], returning: bool
) -> Any:
    """The compare-and-set UPDATE of one shape, built once: `UPDATE t SET status, version + 1,
    updated_at, <values> WHERE pk = :cas_id AND status = :cas_from AND <guard> [RETURNING *]`
    (a guard on None is IS NULL). Building a statement per call costs as much CPU as running it.
    Bind names are prefixed: a bind named like a column is reserved by SQLAlchemy."""
    table, pk = TABLES[entity]
    stmt = (
        update(table)
        .where(
            table.c[pk] == bindparam("cas_id"),
            table.c.status == bindparam("cas_from"),
            *(
                table.c[k].is_(None) if is_none else table.c[k] == bindparam(f"g_{k}")
                for k, is_none in guard
            ),
        )
        .values(
            {
                table.c.status: bindparam("v_status"),
                table.c.version: table.c.version + 1,
                table.c.updated_at: bindparam("v_updated_at"),
                **{table.c[k]: bindparam(f"v_{k}") for k in values},
            }
        )
    )
    return stmt.returning(*table.c) if returning else stmt


def _row(obj: Any, cols: list[str]) -> dict[str, Any]:
    return {c: getattr(obj, c) for c in cols}


class SqlTx(BalancesTx):
    """One transaction on one connection; see ports.Tx.

    Transition log rows and outbox events are kept in order and written by `flush()`, one
    multi-row statement each, just before COMMIT (SqlStore.begin): nothing in a transaction
    reads them back, and each write would otherwise be a round trip of its own."""

    def __init__(self, conn: AsyncConnection, clock: Clock) -> None:
        self.conn = conn
        self.clock = clock
        self._logs: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []

    async def flush(self) -> None:
        if self._logs:
            logs, self._logs = self._logs, []
            await self.conn.execute(_INSERT_TRANSITIONS, logs)
        if self._events:
            events, self._events = self._events, []
            await self.conn.execute(_INSERT_EVENTS, events)

    async def insert_payment(self, payment: Payment) -> None:
        try:
            await self.conn.execute(_INSERT_PAYMENT, _row(payment, _PAYMENT_COLS))
        except IntegrityError as e:
            raise DuplicateKey("payment_biz_no") from e

    async def insert_instruction(self, instruction: Instruction) -> None:
        try:
            await self.conn.execute(_INSERT_INSTRUCTION, _row(instruction, _INSTRUCTION_COLS))
        except IntegrityError as e:
            raise DuplicateKey("instruction_live") from e

    async def transition(self, change: Change, *, event: str | None = None) -> bool:
        states.check(change.entity, change.frm, change.to)
        table, pk = TABLES[change.entity]
        guard, values = change.guard or {}, change.values or {}
        returning = event is not None and bool(self.conn.dialect.update_returning)
        shape = tuple((k, v is None) for k, v in guard.items())
        stmt = _cas(change.entity, shape, tuple(values), returning)
        params = {
            **{f"g_{k}": v for k, v in guard.items() if v is not None},
            **{f"v_{k}": v for k, v in values.items()},
            "cas_id": change.id,
            "cas_from": change.frm,
            "v_status": change.to,
            "v_updated_at": self.clock.now(),
        }
        row: Row[Any] | None = None
        if returning:  # the event's data comes back with the CAS: no second read
            row = (await self.conn.execute(stmt, params)).first()
            if row is None:
                return False
        elif (await self.conn.execute(stmt, params)).rowcount != 1:
            return False
        await self.log(change.entity, change.id, change.frm, change.to, change.reason, change.actor)
        if event is not None:
            if row is None:  # MariaDB has no UPDATE ... RETURNING
                row = (await self.conn.execute(select(table).where(table.c[pk] == change.id))).one()
            data = {k: _jsonable(v) for k, v in row._mapping.items()}
            await self.add_event(data["merchant_id"], event, change.id, data)
        return True

    async def log(
        self, entity: Entity, id: str, frm: str | None, to: str, reason: str, actor: str
    ) -> None:
        self._logs.append(
            {
                "entity": entity.value,
                "entity_id": id,
                "from_status": frm,
                "to_status": to,
                "reason": reason[:512],
                "actor": actor[:64],
                "created_at": self.clock.now(),
            }
        )

    async def add_event(
        self, merchant_id: str, kind: str, object_id: str, data: dict[str, Any]
    ) -> None:
        now = self.clock.now()
        self._events.append(
            {
                "id": new_id("evt", now),
                "merchant_id": merchant_id,
                "kind": kind,
                "object_id": object_id,
                "data": json.dumps(data, sort_keys=True),
                "next_attempt_at": now,
                "created_at": now,
            }
        )

    async def get_payment(self, merchant_id: str, biz_no: str) -> Payment | None:
        return await _get_payment(self.conn, merchant_id, biz_no)

    async def get_payment_by_id(self, payment_id: str) -> Payment | None:
        q = select(t.payments).where(t.payments.c.id == payment_id)
        row = (await self.conn.execute(q)).first()
        return to_payment(row) if row else None

    async def get_instruction(self, request_id: str) -> Instruction | None:
        q = select(t.instructions).where(t.instructions.c.request_id == request_id)
        row = (await self.conn.execute(q)).first()
        return to_instruction(row) if row else None

    async def touch_instruction(
        self, request_id: str, status: str, guard: dict[str, Any], values: dict[str, Any]
    ) -> bool:
        c = t.instructions.c
        cond = [c.request_id == request_id, c.status == status]
        cond += [c[k] == v for k, v in guard.items()]
        stmt = update(t.instructions).where(*cond).values(updated_at=self.clock.now(), **values)
        return (await self.conn.execute(stmt)).rowcount == 1

    async def insert_inbox(
        self, channel: str, notify_id: str, request_id: str, result: str, body: str
    ) -> None:
        row = {
            "channel": channel,
            "notify_id": notify_id,
            "request_id": request_id,
            "result": result,
            "body": body,
            "received_at": self.clock.now(),
        }
        try:
            await self.conn.execute(insert(t.callback_inbox).values(**row))
        except IntegrityError as e:
            raise DuplicateKey("callback_inbox") from e

    async def set_inbox_result(self, channel: str, notify_id: str, result: str) -> None:
        c = t.callback_inbox.c
        stmt = update(t.callback_inbox).where(c.channel == channel, c.notify_id == notify_id)
        await self.conn.execute(stmt.values(result=result))

    async def add_discrepancy(self, d: Discrepancy) -> bool:
        row = {
            "id": new_id("dis", self.clock.now()),
            "dedupe_key": d.dedupe_key[:200],
            "source": d.source,
            "class": d.cls,
            "channel": d.channel,
            "request_id": d.request_id,
            "merchant_id": d.merchant_id,
            "payment_id": d.payment_id,
            "run_id": d.run_id,
            "local": json.dumps(d.local, sort_keys=True, default=str),
            "remote": json.dumps(d.remote, sort_keys=True, default=str),
            "created_at": self.clock.now(),
        }
        return await insert_ignore(self.conn, t.discrepancies, row)

    async def open_review(self, instruction: Instruction, reason: str) -> bool:
        row = {
            "id": new_id("rev", self.clock.now()),
            "dedupe_key": f"unresolved:{instruction.request_id}",
            "kind": "UNRESOLVED",
            "request_id": instruction.request_id,
            "merchant_id": instruction.merchant_id,
            "payment_id": instruction.payment_id,
            "reason": reason[:512],
            "status": "OPEN",
            "created_at": self.clock.now(),
        }
        return await insert_ignore(self.conn, t.reviews, row)

    async def open_discrepancy_review(self, d: Discrepancy, reason: str) -> bool:
        """A review item for evidence that could not be corrected automatically (once per key)."""
        row = {
            "id": new_id("rev", self.clock.now()),
            "dedupe_key": f"discrepancy:{d.dedupe_key}"[:200],
            "kind": "DISCREPANCY",
            "request_id": d.request_id,
            "merchant_id": d.merchant_id,
            "payment_id": d.payment_id,
            "reason": reason[:512],
            "status": "OPEN",
            "created_at": self.clock.now(),
        }
        return await insert_ignore(self.conn, t.reviews, row)

    async def resolve_review(self, review_id: str, outcome: str, note: str, by: str) -> bool:
        c = t.reviews.c
        stmt = (
            update(t.reviews)
            .where(c.id == review_id, c.status == "OPEN")
            .values(
                status="RESOLVED",
                outcome=outcome,
                note=note[:1000],
                resolved_by=by[:64],
                resolved_at=self.clock.now(),
            )
        )
        return (await self.conn.execute(stmt)).rowcount == 1

    async def close_review(
        self, request_id: str, outcome: str, note: str, resolved_by: str
    ) -> bool:
        return await self.close_reviews([request_id], outcome, note, resolved_by) == 1

    async def close_reviews(
        self, request_ids: Sequence[str], outcome: str, note: str, resolved_by: str
    ) -> int:
        if not request_ids:
            return 0
        c = t.reviews.c
        stmt = (
            update(t.reviews)
            .where(c.request_id.in_(request_ids), c.kind == "UNRESOLVED", c.status == "OPEN")
            .values(
                status="RESOLVED",
                outcome=outcome,
                note=note[:1000],
                resolved_by=resolved_by[:64],
                resolved_at=self.clock.now(),
            )
        )
        return int((await self.conn.execute(stmt)).rowcount)


AGE_BUCKETS = ((60, "1m"), (900, "15m"), (3600, "1h"), (86400, "24h"))


@dataclass(frozen=True, slots=True)
class SettlementStats:
    unresolved: dict[tuple[str, str], int]  # (status, age bucket) -> count
    reviews_open: dict[str, int]  # kind -> count
    webhooks_pending: int
    webhook_lag_s: float


async def insert_ignore(conn: AsyncConnection, table: Table, row: dict[str, Any]) -> bool:
    """Insert unless a unique key exists, without an error that would abort the transaction.
    True when the row was inserted."""
    name = conn.dialect.name
    if name == "postgresql":  # psycopg reports no rowcount here: ask for the row instead
        stmt: Any = pg_insert(table).values(**row).on_conflict_do_nothing()
        returned = await conn.execute(stmt.returning(*table.primary_key.columns))
        return returned.first() is not None
    if name == "sqlite":
        stmt = insert(table).values(**row).prefix_with("OR IGNORE")
    else:
        stmt = insert(table).values(**row).prefix_with("IGNORE")
    return bool((await conn.execute(stmt)).rowcount == 1)


def _jsonable(v: Any) -> Any:
    return v.isoformat() if hasattr(v, "isoformat") else v


async def _get_payment(conn: AsyncConnection, merchant_id: str, biz_no: str) -> Payment | None:
    q = select(t.payments).where(
        t.payments.c.merchant_id == merchant_id, t.payments.c.biz_no == biz_no
    )
    row = (await conn.execute(q)).first()
    return to_payment(row) if row else None


class SqlStore(BalancesStore):
    """The Store port over SQLAlchemy Core; the same code on SQLite, PostgreSQL and MariaDB."""

    def __init__(
        self, engine: AsyncEngine, clock: Clock, *, autocommit: AsyncEngine | None = None
    ) -> None:
        self.engine = engine
        # statements that stand alone: one round trip each (engine.py); None on SQLite
        self.autocommit = autocommit
        self.reads = autocommit or engine
        self.clock = clock
        # SQLite has one writer; waiting writers poll with growing sleeps (its busy handler), so
        # the writers of one process queue here instead, in order and without sleeping.
        self._writers = sqlite.WriterQueue() if engine.dialect.name == "sqlite" else None

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[SqlTx]:
        async with self._writers or nullcontext(), self.engine.connect() as conn:
            await conn.execution_options(**{WRITE_OPTION: True})
            async with conn.begin():
                tx = SqlTx(conn, self.clock)
                yield tx
                await tx.flush()

    @asynccontextmanager
    async def standalone(self) -> AsyncIterator[AsyncConnection]:
        """A connection for a write that is one statement: autocommit (one round trip, no BEGIN
        and COMMIT) where there is an autocommit pool, else a transaction of its own (SQLite)."""
        if self.autocommit is not None:
            async with self.autocommit.connect() as conn:
                yield conn
        else:
            async with self.begin() as tx:
                yield tx.conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self.reads.connect() as conn:
            yield conn

    async def get_payment(self, merchant_id: str, biz_no: str) -> Payment | None:
        async with self._read() as conn:
            return await _get_payment(conn, merchant_id, biz_no)

    async def get_payment_by_id(self, payment_id: str) -> Payment | None:
        async with self._read() as conn:
            row = (
                await conn.execute(select(t.payments).where(t.payments.c.id == payment_id))
            ).first()
            return to_payment(row) if row else None

    async def payment_view(self, payment: Payment) -> PaymentView:
        q = (
            select(t.instructions)
            .where(
                t.instructions.c.payment_id == payment.id,
                t.instructions.c.owner_kind == Entity.PAYMENT.value,
            )
            .order_by(t.instructions.c.attempt, t.instructions.c.created_at)
        )
        async with self._read() as conn:
            rows = (await conn.execute(q)).all()
        return PaymentView(payment, tuple(to_instruction(r) for r in rows))

    async def find_view(self, merchant_id: str, biz_no: str) -> PaymentView | None:
        params = {"merchant_id": merchant_id, "biz_no": biz_no}
        async with self._read() as conn:
            return to_view((await conn.execute(_VIEW_BY_BIZ_NO, params)).all())

    async def view_by_id(self, payment_id: str) -> PaymentView | None:
        async with self._read() as conn:
            return to_view((await conn.execute(_VIEW_BY_ID, {"payment_id": payment_id})).all())

    async def get_instruction(self, request_id: str) -> Instruction | None:
        q = select(t.instructions).where(t.instructions.c.request_id == request_id)
        async with self._read() as conn:
            row = (await conn.execute(q)).first()
        return to_instruction(row) if row else None

    async def list_payments(
        self,
        merchant_id: str,
        *,
        order_no: str | None,
        status: str | None,
        limit: int,
        before_id: str | None,
    ) -> list[Payment]:
        c = t.payments.c
        cond = [c.merchant_id == merchant_id]
        if order_no is not None:
            cond.append(c.order_no == order_no)
        if status is not None:
            cond.append(c.status == status)
        if before_id is not None:
            cond.append(c.id < before_id)
        q = select(t.payments).where(and_(*cond)).order_by(c.id.desc()).limit(limit)
        async with self._read() as conn:
            return [to_payment(r) for r in (await conn.execute(q)).all()]

    async def find_principal(self, key_hash: str) -> Principal | None:
        async with self._read() as conn:
            for table, is_op in ((t.merchants, False), (t.operators, True)):
                q = select(table.c.id, table.c.name).where(table.c.api_key_hash == key_hash)
                row = (await conn.execute(q)).first()
                if row:
                    return Principal(row.id, row.name, is_operator=is_op)
        return None

    async def add_merchant(self, merchant_id: str, name: str, key_hash: str) -> None:
        await self._add_principal(t.merchants, merchant_id, name, key_hash)

    async def add_operator(self, operator_id: str, name: str, key_hash: str) -> None:
        await self._add_principal(t.operators, operator_id, name, key_hash)

    async def _add_principal(self, table: Table, id: str, name: str, key_hash: str) -> None:
        async with self.begin() as tx:
            await tx.conn.execute(
                insert(table).values(
                    id=id, name=name, api_key_hash=key_hash, created_at=self.clock.now()
                )
            )

    async def settlement_stats(self) -> SettlementStats:
        """Counts for the settlement gauges, each one grouped query on an indexed column."""
        now = self.clock.now()
        i, r, o = t.instructions.c, t.reviews.c, t.outbox.c
        age = case(
            *((i.created_at >= now - timedelta(seconds=s), label) for s, label in AGE_BUCKETS),
            else_="older",
        )
        live = [s.value for s in LIVE_INSTRUCTION]
        q_live = (
            select(i.status, age, func.count()).where(i.status.in_(live)).group_by(i.status, age)
        )
        q_reviews = select(r.kind, func.count()).where(r.status == "OPEN").group_by(r.kind)
        q_outbox = select(func.count(), func.min(o.created_at)).where(o.status == "PENDING")
        async with self._read() as conn:
            unresolved = {(s, a): int(n) for s, a, n in (await conn.execute(q_live)).all()}
            reviews = {k: int(n) for k, n in (await conn.execute(q_reviews)).all()}
            pending, oldest = (await conn.execute(q_outbox)).one()
        if isinstance(oldest, str):  # SQLite hands back text for an aggregate
            oldest = datetime.fromisoformat(oldest).replace(tzinfo=UTC)
        elif oldest is not None and oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=UTC)
        lag = (now - oldest).total_seconds() if oldest is not None else 0.0
        return SettlementStats(unresolved, reviews, int(pending), max(lag, 0.0))

    async def events_for(self, object_id: str) -> list[dict[str, Any]]:
        """The outbox events of one object, in delivery order, with their delivery state."""
        o = t.outbox.c
        cols = (
            o.id,
            o.kind,
            o.status,
            o.attempts,
            o.last_error,
            o.next_attempt_at,
            o.delivered_at,
            o.created_at,
        )
        q = select(*cols).where(o.object_id == object_id).order_by(o.seq)
        async with self._read() as conn:
            return [dict(r._mapping) for r in (await conn.execute(q)).all()]

    async def get_review(self, review_id: str) -> dict[str, Any] | None:
        async with self._read() as conn:
            row = (await conn.execute(select(t.reviews).where(t.reviews.c.id == review_id))).first()
        return dict(row._mapping) if row else None

    async def list_reviews(
        self, *, status: str | None, limit: int, before_id: str | None
    ) -> list[dict[str, Any]]:
        c = t.reviews.c
        cond = [c.status == status] if status else []
        if before_id is not None:
            cond.append(c.id < before_id)
        q = select(t.reviews).where(*cond).order_by(c.id.desc()).limit(limit)
        async with self._read() as conn:
            return [dict(r._mapping) for r in (await conn.execute(q)).all()]

    async def transition_log(self, entity: Entity, id: str) -> list[dict[str, Any]]:
        q = (
            select(t.transitions)
            .where(t.transitions.c.entity_id == id, t.transitions.c.entity == entity.value)
            .order_by(t.transitions.c.id)
        )
        async with self._read() as conn:
            return [dict(r._mapping) for r in (await conn.execute(q)).all()]

    async def payment_views(self, payments: Sequence[Payment]) -> list[PaymentView]:
        if not payments:
            return []
        c = t.instructions.c
        q = (
            select(t.instructions)
            .where(c.payment_id.in_([p.id for p in payments]), c.owner_kind == Entity.PAYMENT.value)
            .order_by(c.attempt, c.created_at)
        )
        async with self._read() as conn:
            rows = (await conn.execute(q)).all()
        by_payment: dict[str, list[Instruction]] = {p.id: [] for p in payments}
        for row in rows:
            instruction = to_instruction(row)
            by_payment[instruction.payment_id].append(instruction)
        return [PaymentView(p, tuple(by_payment[p.id])) for p in payments]

    async def find_principal_hash(self, key_hash: str) -> tuple[Principal, str] | None:
        m, o = t.merchants, t.operators
        q = union_all(
            select(m.c.id, m.c.name, m.c.api_key_hash, literal(0).label("op")).where(
                m.c.api_key_hash == key_hash
            ),
            select(o.c.id, o.c.name, o.c.api_key_hash, literal(1).label("op")).where(
                o.c.api_key_hash == key_hash
            ),
        )
        async with self._read() as conn:
            row = (await conn.execute(q)).first()
        if row is None:
            return None
        return Principal(row.id, row.name, is_operator=bool(row.op)), row.api_key_hash

    async def ping(self) -> None:
        async with self._read() as conn:
            await conn.execute(select(literal(1)))
