"""Refunds: money that leaves, through the same machinery as a charge — caller's number,
write-ahead instruction, a reservation on the payment, one send, CAS, resolution."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from idempay.domain.errors import (
    BizNoReused,
    DuplicateKey,
    InsufficientBalance,
    InvalidRequest,
    NotFound,
)
from idempay.domain.model import OpKind, Payment, Refund, RefundView, check_identifier, new_id
from idempay.domain.money import check_amount
from idempay.domain.ports import Tx
from idempay.domain.states import Entity, InstructionStatus, PaymentStatus
from idempay.services.frontlock import holding, wait_visible
from idempay.services.sending import MoneyFlow, Refused, new_instruction

OnRefund = Callable[[Tx, Refund], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RefundCommand:
    refund_no: str
    biz_no: str
    amount: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RefundResult:
    view: RefundView
    created: bool
    replayed: bool


class Refunds(MoneyFlow):
    async def get(self, merchant_id: str, refund_no: str) -> RefundView:
        refund = await self.store.get_refund(merchant_id, check_identifier(refund_no, "refund_no"))
        if refund is None:
            raise NotFound(f"no refund {refund_no}")
        return await self.store.refund_view(refund)

    async def create(
        self, merchant_id: str, cmd: RefundCommand, *, on_create: OnRefund | None = None
    ) -> RefundResult:
        """Create the refund and send it once, or answer the one that exists."""
        check_identifier(cmd.refund_no, "refund_no")
        check_identifier(cmd.biz_no, "biz_no")
        check_amount(cmd.amount, self.policy.max_amount)
        if cmd.reason is not None and (not isinstance(cmd.reason, str) or len(cmd.reason) > 256):
            raise InvalidRequest("reason is a string of at most 256 characters", field="reason")
        existing = await self.store.get_refund(merchant_id, cmd.refund_no)
        if existing is not None:
            return await self._replay(existing, cmd)
        key = f"idempay:lock:refund:{merchant_id}:{cmd.refund_no}"
        async with holding(self.lock, key, self.policy.lock_ttl_ms) as first:
            if not first:  # a concurrent duplicate holds it: answer the winner's row
                found = await wait_visible(
                    lambda: self.store.get_refund(merchant_id, cmd.refund_no)
                )
                if found is not None:
                    return await self._replay(found, cmd)
            return await self._create(merchant_id, cmd, on_create)

    async def _create(
        self, merchant_id: str, cmd: RefundCommand, on_create: OnRefund | None
    ) -> RefundResult:
        payment = await self.paid_payment(merchant_id, cmd.biz_no, "refunds")
        return await self._open(merchant_id, cmd, payment, purpose="REQUESTED", on_create=on_create)

    async def return_extra_charge(
        self, payment: Payment, refund_no: str, amount: int, reason: str, actor: str
    ) -> RefundResult:
        """Refund a charge the channel executed beyond the payment (a duplicate charge found by
        reconciliation). Not the payment's money, so nothing is reserved; `refund_no` is derived
        from the extra charge, so asking twice refunds once."""
        cmd = RefundCommand(refund_no, payment.biz_no, amount, reason[:256])
        existing = await self.store.get_refund(payment.merchant_id, refund_no)
        if existing is not None:
            return await self._replay(existing, cmd)
        return await self._open(
            payment.merchant_id, cmd, payment, purpose="DUPLICATE_CHARGE", actor=actor
        )

    async def _open(
        self,
        merchant_id: str,
        cmd: RefundCommand,
        payment: Payment,
        *,
        purpose: str,
        on_create: OnRefund | None = None,
        actor: str | None = None,
    ) -> RefundResult:
        now = self.clock.now()
        refund = Refund(
            id=new_id("rfd", now),
            merchant_id=merchant_id,
            refund_no=cmd.refund_no,
            payment_id=payment.id,
            biz_no=payment.biz_no,
            amount=cmd.amount,
            currency=payment.currency,
            channel=payment.channel,
            status=PaymentStatus.PROCESSING,
            reason=cmd.reason,
            version=1,
            created_at=now,
            updated_at=now,
            purpose=purpose,
        )
        ins = new_instruction(
            self.clock,
            merchant_id=merchant_id,
            payment_id=payment.id,
            owner_kind=Entity.REFUND.value,
            owner_id=refund.id,
            kind=OpKind.REFUND,
            channel=payment.channel,
            amount=cmd.amount,
            currency=payment.currency,
            attempt=1,
            stale_pending_s=self.policy.stale_pending_s,
        )
        actor = actor or f"merchant:{merchant_id}"
        try:
            async with self.store.begin() as tx:
                await tx.insert_refund(refund)
                if purpose == "REQUESTED" and not await tx.reserve(payment.id, cmd.amount):
                    raise Refused(
                        InsufficientBalance(
                            f"refund of {cmd.amount} exceeds what is available on {payment.biz_no}"
                        )
                    )
                await tx.insert_instruction(ins)
                await tx.log(
                    Entity.REFUND,
                    refund.id,
                    None,
                    PaymentStatus.PROCESSING,
                    f"created ({purpose}); instruction {ins.request_id}",
                    actor,
                )
                await tx.log(
                    Entity.INSTRUCTION,
                    ins.request_id,
                    None,
                    InstructionStatus.PENDING,
                    "written before sending",
                    actor,
                )
                if on_create is not None:
                    await on_create(tx, refund)
        except DuplicateKey:
            existing = await self.store.get_refund(merchant_id, cmd.refund_no)
            assert existing is not None
            return await self._replay(existing, cmd)
        except Refused as r:
            raise r.error from None
        await self.send_once(ins)
        latest = await self.store.get_refund(merchant_id, cmd.refund_no)
        assert latest is not None
        return RefundResult(await self.store.refund_view(latest), created=True, replayed=False)

    async def _replay(self, existing: Refund, cmd: RefundCommand) -> RefundResult:
        differing = tuple(
            name
            for name, ours in (("biz_no", existing.biz_no), ("amount", existing.amount))
            if getattr(cmd, name) != ours
        )
        if differing:
            raise BizNoReused(
                f"refund_no {cmd.refund_no} exists with a different {', '.join(differing)}",
                fields=differing,
            )
        return RefundResult(await self.store.refund_view(existing), created=False, replayed=True)
