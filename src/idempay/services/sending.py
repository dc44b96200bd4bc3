"""Sending one instruction once, and recording the answer (transaction B), for every kind of
money movement: charges, refunds and split items share this path."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import structlog

from idempay.domain.errors import Declined, InvalidState, NotFound, NotSent, OutcomeUnknown
from idempay.domain.model import Instruction, OpKind, Payment, digest, new_id
from idempay.domain.ports import (
    Channel,
    ChannelAnswer,
    ChannelOp,
    ChannelStatus,
    Clock,
    FrontLock,
    Store,
)
from idempay.domain.states import InstructionStatus, PaymentStatus
from idempay.services.frontlock import Unlocked
from idempay.services.outcomes import Applied, Evidence, apply_outcome

log = structlog.get_logger(__name__)
I = InstructionStatus


@dataclass(frozen=True, slots=True)
class PaymentPolicy:
    max_amount: int = 100_000_000_000
    channel_timeout_s: float = 10.0
    stale_pending_s: float = 30.0
    first_query_after_s: float = 2.0
    public_url: str = "http://127.0.0.1:8000"
    lock_ttl_ms: int = 15_000  # the front lock outlives a normal channel call, not a stuck one


class Refused(Exception):
    """Carries a client error out of a transaction, so the transaction rolls back first."""

    def __init__(self, error: Exception) -> None:
        self.error = error


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: InstructionStatus
    error: str | None = None
    txn_id: str | None = None


def new_instruction(
    clock: Clock,
    *,
    merchant_id: str,
    payment_id: str,
    owner_kind: str,
    owner_id: str,
    kind: OpKind,
    channel: str,
    amount: int,
    currency: str,
    attempt: int,
    stale_pending_s: float,
    receiver_id: str | None = None,
) -> Instruction:
    """A new instruction, PENDING, with a new request_id; due for the worker only once it is
    older than `stale_pending_s` (then its sender must have died)."""
    now = clock.now()
    request_id = new_id("req", now)
    body = {
        "request_id": request_id,
        "kind": kind.value,
        "payment_ref": payment_id,
        "amount": amount,
        "currency": currency,
        "receiver_id": receiver_id,
    }
    return Instruction(
        request_id=request_id,
        merchant_id=merchant_id,
        payment_id=payment_id,
        owner_kind=owner_kind,
        owner_id=owner_id,
        kind=kind.value,
        channel=channel,
        amount=amount,
        currency=currency,
        status=I.PENDING,
        attempt=attempt,
        digest=digest(body),
        send_count=1,
        query_count=0,
        next_query_at=now + timedelta(seconds=stale_pending_s),
        last_error=None,
        channel_txn_id=None,
        version=1,
        created_at=now,
        updated_at=now,
        receiver_id=receiver_id,
    )


def op_for(ins: Instruction, notify_url: str | None) -> ChannelOp:
    return ChannelOp(
        request_id=ins.request_id,
        kind=OpKind(ins.kind),
        payment_ref=ins.payment_id,
        amount=ins.amount,
        currency=ins.currency,
        notify_url=notify_url,
        receiver_id=ins.receiver_id,
    )


async def call_channel(channel: Channel, op: ChannelOp, timeout_s: float) -> Answer:
    """Send once with a deadline. Only a definitive answer is SUCCESS or FAILED; anything that
    leaves the channel's side in doubt is UNKNOWN, never FAILED."""
    bound = log.bind(request_id=op.request_id, payment_id=op.payment_ref, kind=op.kind)
    try:
        async with asyncio.timeout(timeout_s):
            answer = await channel.execute(op)
    except Declined as e:
        return Answer(I.FAILED, f"declined: {e.detail}")
    except NotSent as e:
        return Answer(I.FAILED, f"not sent: {e.detail}")
    except (OutcomeUnknown, TimeoutError) as e:
        bound.warning("channel.outcome_unknown", error=str(e) or type(e).__name__)
        return Answer(I.UNKNOWN, (str(e) or "deadline exceeded")[:256])
    except Exception as e:  # an adapter defect must not turn into FAILED either
        bound.exception("channel.unexpected_error")
        return Answer(I.UNKNOWN, f"unexpected: {type(e).__name__}")
    return status_of(answer, op)


def status_of(answer: ChannelAnswer, op: ChannelOp) -> Answer:
    if answer.amount is not None and (answer.amount, answer.currency) != (op.amount, op.currency):
        return Answer(
            I.UNKNOWN, f"channel answered {answer.amount} {answer.currency}", answer.channel_txn_id
        )
    mapped = {
        ChannelStatus.SUCCESS: I.SUCCESS,
        ChannelStatus.FAILED: I.FAILED,
        ChannelStatus.PROCESSING: I.PROCESSING,
    }.get(answer.status, I.UNKNOWN)
    return Answer(mapped, answer.reason, answer.channel_txn_id)


async def record(
    store: Store,
    clock: Clock,
    ins: Instruction,
    answer: Answer,
    *,
    actor: str,
    first_query_after_s: float,
) -> Applied:
    """Transaction B: CAS the instruction (and its owner) from what it was to the answer."""
    values: dict[str, object] = {"last_error": answer.error}
    if answer.outcome in (I.UNKNOWN, I.PROCESSING):
        values["next_query_at"] = clock.now() + timedelta(seconds=first_query_after_s)
    reason = answer.error or f"channel answered {answer.outcome}"
    ev = Evidence(answer.outcome, actor, reason, answer.txn_id, values)
    async with store.begin() as tx:
        applied, _ = await apply_outcome(tx, ins, ev)
    log.info(
        "instruction.recorded",
        request_id=ins.request_id,
        merchant_id=ins.merchant_id,
        kind=ins.kind,
        status=answer.outcome,
        applied=applied,
    )
    return applied


class MoneyFlow:
    """What every money movement (charge, refund, split) shares: the ports, the policy, the
    front lock, the paid payment refunds and splits draw on, and sending one instruction once."""

    def __init__(
        self,
        store: Store,
        channels: Mapping[str, Channel],
        clock: Clock,
        policy: PaymentPolicy | None = None,
        lock: FrontLock | None = None,
    ) -> None:
        self.store, self.channels, self.clock = store, channels, clock
        self.policy = policy or PaymentPolicy()
        self.lock: FrontLock = lock or Unlocked()

    async def paid_payment(self, merchant_id: str, biz_no: str, what: str) -> Payment:
        """The SUCCESS payment `what` (refunds, splits) draws on: 404 unknown, 409 unpaid."""
        payment = await self.store.get_payment(merchant_id, biz_no)
        if payment is None:
            raise NotFound(f"no payment {biz_no}")
        if payment.status != PaymentStatus.SUCCESS:
            raise InvalidState(
                f"{what} need a SUCCESS payment, it is {payment.status}", status=payment.status
            )
        return payment

    async def send_once(self, ins: Instruction) -> Applied:
        """Send a written instruction once, with a deadline; record the answer (transaction B)."""
        notify = f"{self.policy.public_url}/v1/channels/{ins.channel}/notify"
        answer = await call_channel(
            self.channels[ins.channel], op_for(ins, notify), self.policy.channel_timeout_s
        )
        return await record(
            self.store,
            self.clock,
            ins,
            answer,
            actor="channel",
            first_query_after_s=self.policy.first_query_after_s,
        )
