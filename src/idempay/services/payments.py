"""The charge path: create-or-get by (merchant, biz_no), write ahead, send once, record by CAS."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import structlog

from idempay.domain.errors import (
    BizNoReused,
    DuplicateKey,
    InvalidRequest,
    InvalidState,
    NotFound,
)
from idempay.domain.model import (
    ChargeResult,
    Instruction,
    OpKind,
    Payment,
    PaymentView,
    check_identifier,
    new_id,
)
from idempay.domain.money import check_amount, check_currency
from idempay.domain.ports import Change, Tx
from idempay.domain.states import Entity, InstructionStatus, PaymentStatus
from idempay.services.frontlock import holding, wait_visible
from idempay.services.sending import MoneyFlow, new_instruction

log = structlog.get_logger(__name__)

I, P = InstructionStatus, PaymentStatus
# Written in transaction A, with the payment: lets a caller (the API's Idempotency-Key record)
# add its own rows to the same transaction, so one never exists without the other.
OnCreate = Callable[[Tx, Payment], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ChargeCommand:
    biz_no: str
    order_no: str
    amount: int
    currency: str
    channel: str
    description: str | None = None
    notify_url: str | None = None


class Payments(MoneyFlow):
    """Charges, replays, retries and closes payments. The channel is called at most once per
    instruction from here; everything else is resolved by query (services/resolution.py)."""

    # --- queries -------------------------------------------------------------------------------

    async def get(self, merchant_id: str, biz_no: str) -> PaymentView:
        view = await self.store.find_view(merchant_id, check_identifier(biz_no, "biz_no"))
        if view is None:
            raise NotFound(f"no payment {biz_no}")
        return view

    async def get_by_id(self, merchant_id: str, payment_id: str) -> PaymentView:
        view = await self.store.view_by_id(payment_id)
        if view is None or view.payment.merchant_id != merchant_id:
            raise NotFound(f"no payment {payment_id}")
        return view

    async def list_payments(
        self,
        merchant_id: str,
        *,
        order_no: str | None = None,
        status: str | None = None,
        limit: int = 20,
        before_id: str | None = None,
    ) -> list[PaymentView]:
        """The merchant's payments, newest first, `before_id` exclusive (a cursor)."""
        payments = await self.store.list_payments(
            merchant_id, order_no=order_no, status=status, limit=limit, before_id=before_id
        )
        return await self.store.payment_views(payments)

    # --- create or get -------------------------------------------------------------------------

    def validate(self, cmd: ChargeCommand) -> ChargeCommand:
        check_identifier(cmd.biz_no, "biz_no")
        check_identifier(cmd.order_no, "order_no")
        check_amount(cmd.amount, self.policy.max_amount)
        check_currency(cmd.currency)
        if cmd.channel not in self.channels:
            raise InvalidRequest(f"unknown channel {cmd.channel!r}", field="channel")
        return cmd

    async def charge(
        self, merchant_id: str, cmd: ChargeCommand, *, on_create: OnCreate | None = None
    ) -> ChargeResult:
        """Create the payment and charge it once, or answer the one that exists."""
        self.validate(cmd)
        existing = await self.store.find_view(merchant_id, cmd.biz_no)
        if existing is not None:
            return self._replay(existing, cmd)
        key = f"idempay:lock:pay:{merchant_id}:{cmd.biz_no}"
        async with holding(self.lock, key, self.policy.lock_ttl_ms) as first:
            if not first:  # a concurrent duplicate holds it: answer the winner's row
                found = await wait_visible(lambda: self.store.find_view(merchant_id, cmd.biz_no))
                if found is not None:
                    return self._replay(found, cmd, stopped_by="front_lock")
            return await self._create(merchant_id, cmd, on_create)

    async def _create(
        self, merchant_id: str, cmd: ChargeCommand, on_create: OnCreate | None
    ) -> ChargeResult:
        now = self.clock.now()
        payment = Payment(
            id=new_id("pay", now),
            merchant_id=merchant_id,
            biz_no=cmd.biz_no,
            order_no=cmd.order_no,
            amount=cmd.amount,
            currency=cmd.currency,
            channel=cmd.channel,
            status=P.PROCESSING,
            attempt=1,
            refunded_amount=0,
            split_amount=0,
            reserved_amount=0,
            description=cmd.description,
            notify_url=cmd.notify_url,
            version=1,
            created_at=now,
            updated_at=now,
        )
        instruction = self._instruction(payment)
        actor = f"merchant:{merchant_id}"
        try:
            async with self.store.begin() as tx:
                await tx.insert_payment(payment)
                await tx.insert_instruction(instruction)
                await tx.log(
                    Entity.PAYMENT,
                    payment.id,
                    None,
                    P.PROCESSING,
                    f"created; instruction {instruction.request_id} written",
                    actor,
                )
                await tx.log(
                    Entity.INSTRUCTION,
                    instruction.request_id,
                    None,
                    I.PENDING,
                    "written before sending",
                    actor,
                )
                if on_create is not None:
                    await on_create(tx, payment)
        except DuplicateKey:  # a concurrent request with the same biz_no won the insert
            existing = await self.store.find_view(merchant_id, cmd.biz_no)
            if existing is None:  # pragma: no cover - the winner's row is committed by now
                raise
            return self._replay(existing, cmd)
        view = await self._send(payment, instruction)
        return ChargeResult(view, created=True, replayed=False)

    def _replay(
        self, view: PaymentView, cmd: ChargeCommand, *, stopped_by: str = "biz_no"
    ) -> ChargeResult:
        existing = view.payment
        differing = tuple(
            name
            for name, ours in (
                ("amount", existing.amount),
                ("currency", existing.currency),
                ("order_no", existing.order_no),
                ("channel", existing.channel),
            )
            if getattr(cmd, name) != ours
        )
        if differing:
            raise BizNoReused(
                f"biz_no {cmd.biz_no} exists with a different {', '.join(differing)}",
                fields=differing,
            )
        log.info(
            "payment.replayed",
            merchant_id=existing.merchant_id,
            biz_no=existing.biz_no,
            status=existing.status,
            stopped_by=stopped_by,
        )
        return ChargeResult(view, created=False, replayed=True, stopped_by=stopped_by)

    # --- retry and close -----------------------------------------------------------------------

    async def retry(
        self,
        merchant_id: str,
        biz_no: str,
        amount: int | None = None,
        *,
        on_start: OnCreate | None = None,
    ) -> ChargeResult:
        """FAILED -> INIT -> PROCESSING with a new instruction (new request_id). `on_start` runs
        in that transaction (like charge's `on_create`)."""
        current = await self._must_get(merchant_id, biz_no)
        if current.status != P.FAILED:
            raise InvalidState(
                f"retry needs FAILED, payment is {current.status}", status=current.status
            )
        new_amount = (
            current.amount if amount is None else check_amount(amount, self.policy.max_amount)
        )
        payment = replace(current, amount=new_amount, attempt=current.attempt + 1)
        instruction = self._instruction(payment)
        actor = f"merchant:{merchant_id}"
        reason = f"retry as attempt {payment.attempt}"
        if new_amount != current.amount:
            reason += f"; amount changed {current.amount} -> {new_amount}"
        try:
            async with self.store.begin() as tx:
                values = {"attempt": payment.attempt, "amount": new_amount}
                if not await tx.transition(
                    Change(Entity.PAYMENT, current.id, P.FAILED, P.INIT, reason, actor, values)
                ):
                    raise _LostRace
                await tx.insert_instruction(instruction)
                await tx.log(
                    Entity.INSTRUCTION,
                    instruction.request_id,
                    None,
                    I.PENDING,
                    "written before sending",
                    actor,
                )
                moved = await tx.transition(
                    Change(
                        Entity.PAYMENT,
                        current.id,
                        P.INIT,
                        P.PROCESSING,
                        f"instruction {instruction.request_id} written",
                        actor,
                    ),
                    event="payment.processing",
                )
                assert moved, "INIT -> PROCESSING inside the transaction that set INIT"
                if on_start is not None:
                    await on_start(tx, payment)
        except (_LostRace, DuplicateKey):
            now = await self._must_get(merchant_id, biz_no)
            raise InvalidState(
                f"retry needs FAILED, payment is {now.status}", status=now.status
            ) from None
        view = await self._send(replace(payment, status=P.PROCESSING), instruction)
        return ChargeResult(view, created=True, replayed=False)

    async def close(
        self, merchant_id: str, biz_no: str, *, on_close: OnCreate | None = None
    ) -> PaymentView:
        """INIT or FAILED -> CLOSED; `on_close` runs in that transaction when it moved."""
        current = await self._must_get(merchant_id, biz_no)
        if current.status not in (P.INIT, P.FAILED):
            raise InvalidState(
                f"close needs INIT or FAILED, payment is {current.status}", status=current.status
            )
        async with self.store.begin() as tx:
            moved = await tx.transition(
                Change(
                    Entity.PAYMENT,
                    current.id,
                    current.status,
                    P.CLOSED,
                    "closed by merchant",
                    f"merchant:{merchant_id}",
                ),
                event="payment.closed",
            )
            if moved and on_close is not None:
                await on_close(tx, current)
        latest = await self.get(merchant_id, biz_no)
        if not moved:
            status = latest.payment.status
            raise InvalidState(f"close needs INIT or FAILED, payment is {status}", status=status)
        return latest

    async def _must_get(self, merchant_id: str, biz_no: str) -> Payment:
        payment = await self.store.get_payment(merchant_id, check_identifier(biz_no, "biz_no"))
        if payment is None:
            raise NotFound(f"no payment {biz_no}")
        return payment

    # --- the channel call and transaction B ----------------------------------------------------

    def _instruction(self, payment: Payment) -> Instruction:
        return new_instruction(
            self.clock,
            merchant_id=payment.merchant_id,
            payment_id=payment.id,
            owner_kind=Entity.PAYMENT.value,
            owner_id=payment.id,
            kind=OpKind.PAY,
            channel=payment.channel,
            amount=payment.amount,
            currency=payment.currency,
            attempt=payment.attempt,
            stale_pending_s=self.policy.stale_pending_s,
        )

    async def _send(self, payment: Payment, instruction: Instruction) -> PaymentView:
        await self.send_once(instruction)
        view = await self.store.view_by_id(payment.id)
        assert view is not None
        return view


class _LostRace(Exception):
    """Another request moved the row first."""
