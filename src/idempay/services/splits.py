"""Splits (profit sharing): one total, one item per receiver, each item its own instruction.

Only a PENDING split may start (CAS PENDING -> PROCESSING), so a split executes once however
often it is requested; items run independently, so one UNKNOWN item does not stop the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from idempay.domain.errors import (
    BizNoReused,
    DuplicateKey,
    InsufficientBalance,
    InvalidRequest,
    NotFound,
)
from idempay.domain.model import (
    Instruction,
    OpKind,
    Split,
    SplitItem,
    SplitView,
    check_identifier,
    new_id,
)
from idempay.domain.money import check_amount
from idempay.domain.ports import Change, Tx
from idempay.domain.states import (
    Entity,
    InstructionStatus,
    SplitItemStatus,
    SplitStatus,
)
from idempay.services.frontlock import holding, wait_visible
from idempay.services.sending import MoneyFlow, Refused, new_instruction

MAX_RECEIVERS = 50
# Run inside the transaction that creates the split (e.g. the API's Idempotency-Key claim), so
# one never exists without the other.
OnSplit = Callable[[Tx, Split], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Receiver:
    receiver_id: str
    amount: int


@dataclass(frozen=True, slots=True)
class SplitCommand:
    split_no: str
    biz_no: str
    receivers: tuple[Receiver, ...]


@dataclass(frozen=True, slots=True)
class SplitResult:
    view: SplitView
    created: bool
    replayed: bool


class Splits(MoneyFlow):
    async def get(self, merchant_id: str, split_no: str) -> SplitView:
        split = await self.store.get_split(merchant_id, check_identifier(split_no, "split_no"))
        if split is None:
            raise NotFound(f"no split {split_no}")
        return await self.store.split_view(split)

    def validate(self, cmd: SplitCommand) -> int:
        check_identifier(cmd.split_no, "split_no")
        check_identifier(cmd.biz_no, "biz_no")
        if not 1 <= len(cmd.receivers) <= MAX_RECEIVERS:
            raise InvalidRequest(f"receivers: 1 to {MAX_RECEIVERS}", field="receivers")
        for r in cmd.receivers:
            check_identifier(r.receiver_id, "receiver_id")
            check_amount(r.amount, self.policy.max_amount, field="receivers.amount")
        if len({r.receiver_id for r in cmd.receivers}) != len(cmd.receivers):
            raise InvalidRequest("receiver_id must be distinct", field="receivers")
        return check_amount(sum(r.amount for r in cmd.receivers), self.policy.max_amount)

    async def create(
        self, merchant_id: str, cmd: SplitCommand, *, on_create: OnSplit | None = None
    ) -> SplitResult:
        """Create the split (reserving its total) and execute it once, or answer the one that
        exists — starting it if its creator died before it could. `on_create` runs in the
        creating transaction only."""
        total = self.validate(cmd)
        existing = await self.store.get_split(merchant_id, cmd.split_no)
        created = False
        if existing is None:
            key = f"idempay:lock:split:{merchant_id}:{cmd.split_no}"
            async with holding(self.lock, key, self.policy.lock_ttl_ms) as first:
                if first:
                    existing = await self._create(merchant_id, cmd, total, on_create)
                    created = existing is not None
                    return await self._finish(merchant_id, existing, cmd, created)
                await wait_visible(lambda: self.store.get_split(merchant_id, cmd.split_no))
        return await self._finish(merchant_id, existing, cmd, created)

    async def _finish(
        self, merchant_id: str, existing: Split | None, cmd: SplitCommand, created: bool
    ) -> SplitResult:
        """Start the split if it is still PENDING (its creator may have died), then answer it."""
        split = existing or await self.store.get_split(merchant_id, cmd.split_no)
        assert split is not None
        if not created:
            await self._check_same(split, cmd)
        started = await self._start(split) if split.status == SplitStatus.PENDING else False
        latest = await self.store.get_split_by_id(split.id)
        assert latest is not None
        view = await self.store.split_view(latest)
        return SplitResult(view, created=created, replayed=not created and not started)

    async def _create(
        self, merchant_id: str, cmd: SplitCommand, total: int, on_create: OnSplit | None = None
    ) -> Split | None:
        payment = await self.paid_payment(merchant_id, cmd.biz_no, "splits")
        now = self.clock.now()
        split = Split(
            id=new_id("spl", now),
            merchant_id=merchant_id,
            split_no=cmd.split_no,
            payment_id=payment.id,
            biz_no=payment.biz_no,
            amount=total,
            currency=payment.currency,
            channel=payment.channel,
            status=SplitStatus.PENDING,
            version=1,
            created_at=now,
            updated_at=now,
        )
        items = [
            SplitItem(
                id=new_id("spi", now),
                split_id=split.id,
                merchant_id=merchant_id,
                position=i,
                receiver_id=r.receiver_id,
                amount=r.amount,
                status=SplitItemStatus.PENDING,
                version=1,
                created_at=now,
                updated_at=now,
            )
            for i, r in enumerate(cmd.receivers)
        ]
        actor = f"merchant:{merchant_id}"
        try:
            async with self.store.begin() as tx:
                await tx.insert_split(split, items)
                if not await tx.reserve(payment.id, total):
                    raise Refused(
                        InsufficientBalance(
                            f"split of {total} exceeds what is available on {payment.biz_no}"
                        )
                    )
                await tx.log(
                    Entity.SPLIT,
                    split.id,
                    None,
                    SplitStatus.PENDING,
                    f"created; reserved {total} for {len(items)} receivers",
                    actor,
                )
                if on_create is not None:
                    await on_create(tx, split)
        except DuplicateKey:
            return None  # a concurrent request created it: answer that one
        except Refused as r:
            raise r.error from None
        return split

    async def _check_same(self, split: Split, cmd: SplitCommand) -> None:
        view = await self.store.split_view(split)
        ours = [(i.receiver_id, i.amount) for i, _ in view.items]
        theirs = [(r.receiver_id, r.amount) for r in cmd.receivers]
        differing = tuple(
            name
            for name, same in (
                ("biz_no", split.biz_no == cmd.biz_no),
                ("receivers", ours == theirs),
            )
            if not same
        )
        if differing:
            raise BizNoReused(
                f"split_no {cmd.split_no} exists with different {', '.join(differing)}",
                fields=differing,
            )

    async def _start(self, split: Split) -> bool:
        """PENDING -> PROCESSING with one instruction per item, then send them all at once.
        False when another request started it first (it is then executing there)."""
        view = await self.store.split_view(split)
        actor = f"merchant:{split.merchant_id}"
        instructions = [
            new_instruction(
                self.clock,
                merchant_id=split.merchant_id,
                payment_id=split.payment_id,
                owner_kind=Entity.SPLIT_ITEM.value,
                owner_id=item.id,
                kind=OpKind.SPLIT,
                channel=split.channel,
                amount=item.amount,
                currency=split.currency,
                attempt=1,
                stale_pending_s=self.policy.stale_pending_s,
                receiver_id=item.receiver_id,
            )
            for item, _ in view.items
        ]
        async with self.store.begin() as tx:
            if not await tx.transition(
                Change(
                    Entity.SPLIT,
                    split.id,
                    SplitStatus.PENDING,
                    SplitStatus.PROCESSING,
                    f"executing {len(instructions)} items",
                    actor,
                ),
                event="split.processing",
            ):
                return False
            for (item, _), ins in zip(view.items, instructions, strict=True):
                await tx.insert_instruction(ins)
                await tx.transition(
                    Change(
                        Entity.SPLIT_ITEM,
                        item.id,
                        SplitItemStatus.PENDING,
                        SplitItemStatus.PROCESSING,
                        f"instruction {ins.request_id}",
                        actor,
                    )
                )
                await tx.log(
                    Entity.INSTRUCTION,
                    ins.request_id,
                    None,
                    InstructionStatus.PENDING,
                    "written before sending",
                    actor,
                )
        await asyncio.gather(*(self._send(split, ins) for ins in instructions))
        return True

    async def _send(self, split: Split, ins: Instruction) -> None:
        await self.send_once(ins)
