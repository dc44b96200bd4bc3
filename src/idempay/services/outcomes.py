"""Applying an instruction's outcome: one CAS on the instruction and its owner, in one transaction.

Every source of evidence (the charge's own answer, a callback, a query, an operator) goes through
`apply_outcome`, so they can race freely: the first one moves the rows, the others see why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from idempay.domain.errors import InvalidState
from idempay.domain.model import Instruction
from idempay.domain.ports import Change, Tx
from idempay.domain.states import (
    Entity,
    InstructionStatus,
    SplitStatus,
    payment_status_for,
    split_outcome,
)

I = InstructionStatus
TERMINAL = frozenset({I.SUCCESS, I.FAILED})


class Applied(StrEnum):
    APPLIED = "APPLIED"  # this call moved the instruction (and its owner)
    SAME = "SAME"  # it was already there: nothing to do
    CONFLICT = "CONFLICT"  # it is terminal with the other outcome: a discrepancy
    MOVED = "MOVED"  # someone else moved it to another non-terminal state first
    SUPERSEDED = "SUPERSEDED"  # "unknown" or "processing" arrived after a definitive outcome


@dataclass(frozen=True, slots=True)
class Evidence:
    outcome: InstructionStatus
    actor: str
    reason: str
    txn_id: str | None = None
    values: dict[str, Any] | None = None
    guard: dict[str, Any] | None = None


async def apply_outcome(tx: Tx, seen: Instruction, ev: Evidence) -> tuple[Applied, Instruction]:
    """CAS `seen` (the state the evidence was judged against) to `ev.outcome`, with its owner.
    On a lost race, re-read and classify; never moves a terminal instruction."""
    if seen.status == ev.outcome:
        return Applied.SAME, seen
    if seen.status in TERMINAL:
        return (Applied.CONFLICT if ev.outcome in TERMINAL else Applied.SUPERSEDED), seen
    values: dict[str, Any] = {"lease_owner": None, "lease_until": None, **(ev.values or {})}
    if ev.txn_id is not None:
        values["channel_txn_id"] = ev.txn_id
    change = Change(
        Entity.INSTRUCTION,
        seen.request_id,
        seen.status,
        ev.outcome,
        ev.reason,
        ev.actor,
        values,
        ev.guard,
    )
    if not await tx.transition(change):
        now = await tx.get_instruction(seen.request_id)
        assert now is not None
        if now.status == ev.outcome:
            return Applied.SAME, now
        if now.status in TERMINAL:
            return (Applied.CONFLICT if ev.outcome in TERMINAL else Applied.SUPERSEDED), now
        return Applied.MOVED, now
    await _move_owner(tx, seen, ev)
    return Applied.APPLIED, seen


async def _move_owner(tx: Tx, seen: Instruction, ev: Evidence) -> None:
    frm = payment_status_for(I(seen.status)).value
    to = payment_status_for(ev.outcome).value
    if to == frm:
        return
    reason = f"instruction {seen.request_id} {ev.outcome}: {ev.reason}"
    if seen.owner_kind == Entity.SPLIT_ITEM:
        await _move_split_item(tx, seen, frm, to, reason, ev.actor)
        return
    entity = Entity(seen.owner_kind)
    change = Change(entity, seen.owner_id, frm, to, reason, ev.actor)
    if not await tx.transition(change, event=f"{entity.value}.{to.lower()}"):
        # the instruction and its owner move together; anything else is a defect
        raise InvalidState(f"{entity.value} {seen.owner_id} is not {frm}")
    if (
        entity is Entity.REFUND
        and to in TERMINAL
        and await tx.refund_purpose(seen.owner_id) == "REQUESTED"
    ):
        spent = "refunded_amount" if to == I.SUCCESS else None
        await tx.settle_reservation(seen.payment_id, seen.amount, spent)


async def _move_split_item(
    tx: Tx, seen: Instruction, frm: str, to: str, reason: str, actor: str
) -> None:
    """An item moves under its split's row lock, so the last item to finish (whichever
    transaction that is) sees every other item's final status and settles the total."""
    item = await tx.get_split_item(seen.owner_id)
    assert item is not None
    split = await tx.lock_split(item.split_id)
    assert split is not None
    if not await tx.transition(Change(Entity.SPLIT_ITEM, item.id, frm, to, reason, actor)):
        raise InvalidState(f"split item {item.id} is not {frm}")
    if to not in TERMINAL:
        return
    await tx.settle_reservation(
        seen.payment_id, seen.amount, "split_amount" if to == I.SUCCESS else None
    )
    total = split_outcome(await tx.split_item_statuses(split.id))
    if total is not None:
        change = Change(
            Entity.SPLIT,
            split.id,
            SplitStatus.PROCESSING,
            total,
            f"every item is final: {total}",
            actor,
        )
        if not await tx.transition(change, event=f"split.{total.lower()}"):
            raise InvalidState(f"split {split.id} is not PROCESSING")
