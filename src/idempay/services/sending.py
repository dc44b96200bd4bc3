"""Sending one instruction once, and recording the answer (transaction B), for every kind of
money movement: charges, refunds and split items share this path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import structlog

from idempay.domain.errors import Declined, NotSent, OutcomeUnknown
from idempay.domain.model import Instruction, OpKind, digest, new_id
from idempay.domain.ports import Channel, ChannelAnswer, ChannelOp, ChannelStatus, Clock, Store
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

log = structlog.get_logger(__name__)
I = InstructionStatus


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
