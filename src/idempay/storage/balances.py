"""Refunds, splits and the payment's balance: reservation by one conditional update.

Mixed into SqlTx / SqlStore (storage/store.py). Refunds and splits share the payment's
available amount `amount - refunded - split - reserved`; a reservation is one
`UPDATE … WHERE available >= :amount`, so concurrent requests can never over-spend it.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from idempay.domain.errors import DuplicateKey
from idempay.domain.model import Refund, RefundView, Split, SplitItem, SplitView
from idempay.domain.states import Entity, PaymentStatus
from idempay.storage import tables as t


def _to(cls: Any, row: Row[Any]) -> Any:
    m = row._mapping
    return cls(**{f.name: m[f.name] for f in fields(cls)})


class BalancesTx:
    conn: AsyncConnection
    clock: Any

    async def insert_refund(self, refund: Refund) -> None:
        try:
            await self.conn.execute(insert(t.refunds).values(**asdict(refund)))
        except IntegrityError as e:
            raise DuplicateKey("refund_no") from e

    async def insert_split(self, split: Split, items: list[SplitItem]) -> None:
        try:
            await self.conn.execute(insert(t.splits).values(**asdict(split)))
        except IntegrityError as e:
            raise DuplicateKey("split_no") from e
        await self.conn.execute(insert(t.split_items), [asdict(i) for i in items])

    async def reserve(self, payment_id: str, amount: int) -> bool:
        """Reserve `amount` of a SUCCESS payment's available balance; False if it is not there."""
        p = t.payments.c
        available = p.amount - p.refunded_amount - p.split_amount - p.reserved_amount
        stmt = (
            update(t.payments)
            .where(p.id == payment_id, p.status == PaymentStatus.SUCCESS.value, available >= amount)
            .values(reserved_amount=p.reserved_amount + amount, updated_at=self.clock.now())
        )
        return bool((await self.conn.execute(stmt)).rowcount == 1)

    async def settle_reservation(self, payment_id: str, amount: int, into: str | None) -> None:
        """Release a reservation; `into` = "refunded_amount" or "split_amount" when it was spent."""
        p = t.payments.c
        values: dict[str, Any] = {
            "reserved_amount": p.reserved_amount - amount,
            "updated_at": self.clock.now(),
        }
        if into is not None:
            values[into] = p[into] + amount
        await self.conn.execute(update(t.payments).where(p.id == payment_id).values(**values))

    async def refund_purpose(self, refund_id: str) -> str:
        q = select(t.refunds.c.purpose).where(t.refunds.c.id == refund_id)
        return str((await self.conn.execute(q)).scalar_one())

    async def get_split_item(self, item_id: str) -> SplitItem | None:
        row = (
            await self.conn.execute(select(t.split_items).where(t.split_items.c.id == item_id))
        ).first()
        return _to(SplitItem, row) if row else None

    async def lock_split(self, split_id: str) -> Split | None:
        """Serialise the transactions that finish items of one split (a row lock by update)."""
        s = t.splits.c
        await self.conn.execute(update(t.splits).where(s.id == split_id).values(version=s.version))
        row = (await self.conn.execute(select(t.splits).where(s.id == split_id))).first()
        return _to(Split, row) if row else None

    async def split_item_statuses(self, split_id: str) -> list[str]:
        q = select(t.split_items.c.status).where(t.split_items.c.split_id == split_id)
        return list((await self.conn.execute(q)).scalars())


class BalancesStore:
    async def _one(self, q: Any) -> Row[Any] | None:
        async with self.reads.connect() as conn:  # type: ignore[attr-defined]
            return (await conn.execute(q)).first()  # type: ignore[no-any-return]

    async def get_refund(self, merchant_id: str, refund_no: str) -> Refund | None:
        c = t.refunds.c
        row = await self._one(
            select(t.refunds).where(c.merchant_id == merchant_id, c.refund_no == refund_no)
        )
        return _to(Refund, row) if row else None

    async def get_split(self, merchant_id: str, split_no: str) -> Split | None:
        c = t.splits.c
        row = await self._one(
            select(t.splits).where(c.merchant_id == merchant_id, c.split_no == split_no)
        )
        return _to(Split, row) if row else None

    async def get_split_by_id(self, split_id: str) -> Split | None:
        row = await self._one(select(t.splits).where(t.splits.c.id == split_id))
        return _to(Split, row) if row else None

    async def refund_view(self, refund: Refund) -> RefundView:
        from idempay.storage.store import to_instruction

        ins = t.instructions.c
        q = select(t.instructions).where(
            ins.owner_id == refund.id, ins.owner_kind == Entity.REFUND.value
        )
        async with self.reads.connect() as conn:  # type: ignore[attr-defined]
            rows = (await conn.execute(q.order_by(ins.attempt))).all()
        return RefundView(refund, tuple(to_instruction(r) for r in rows))

    async def split_view(self, split: Split) -> SplitView:
        from idempay.storage.store import to_instruction

        si, ins = t.split_items.c, t.instructions.c
        q_items = select(t.split_items).where(si.split_id == split.id).order_by(si.position)
        async with self.reads.connect() as conn:  # type: ignore[attr-defined]
            items = [_to(SplitItem, r) for r in (await conn.execute(q_items)).all()]
            q_ins = (
                select(t.instructions)
                .where(
                    ins.owner_kind == Entity.SPLIT_ITEM.value,
                    ins.owner_id.in_([i.id for i in items]),
                )
                .order_by(ins.attempt)
            )
            by_owner = {r.owner_id: to_instruction(r) for r in (await conn.execute(q_ins)).all()}
        return SplitView(split, tuple((i, by_owner.get(i.id)) for i in items))
