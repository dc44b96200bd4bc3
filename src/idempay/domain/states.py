"""Every status enum and its table of allowed transitions; `check()` is the one gate."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from idempay.domain.errors import IllegalTransition


class PaymentStatus(StrEnum):
    INIT = "INIT"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    CLOSED = "CLOSED"


class InstructionStatus(StrEnum):
    PENDING = "PENDING"  # written, not (known to be) answered: sent or about to be, or crashed
    PROCESSING = "PROCESSING"  # the channel accepted it and will settle later
    UNKNOWN = "UNKNOWN"  # timeout, lost answer, 5xx: the channel may have executed
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class SplitStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"  # every item succeeded
    PARTIAL = "PARTIAL"  # some succeeded, some failed
    FAILED = "FAILED"  # every item failed
    CLOSED = "CLOSED"


class SplitItemStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    UNKNOWN = "UNKNOWN"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class Entity(StrEnum):
    PAYMENT = "payment"
    INSTRUCTION = "instruction"
    REFUND = "refund"
    SPLIT = "split"
    SPLIT_ITEM = "split_item"


P, I = PaymentStatus, InstructionStatus

PAYMENT_TRANSITIONS: dict[PaymentStatus, frozenset[PaymentStatus]] = {
    P.INIT: frozenset({P.PROCESSING, P.CLOSED}),
    P.PROCESSING: frozenset({P.SUCCESS, P.FAILED, P.UNKNOWN}),
    P.UNKNOWN: frozenset({P.SUCCESS, P.FAILED}),
    P.FAILED: frozenset({P.INIT, P.CLOSED}),
    P.SUCCESS: frozenset(),
    P.CLOSED: frozenset(),
}

INSTRUCTION_TRANSITIONS: dict[InstructionStatus, frozenset[InstructionStatus]] = {
    I.PENDING: frozenset({I.PROCESSING, I.UNKNOWN, I.SUCCESS, I.FAILED}),
    I.PROCESSING: frozenset({I.UNKNOWN, I.SUCCESS, I.FAILED}),
    I.UNKNOWN: frozenset({I.SUCCESS, I.FAILED}),
    I.SUCCESS: frozenset(),
    I.FAILED: frozenset(),
}

S, SI = SplitStatus, SplitItemStatus

# Only PENDING may start executing: the CAS PENDING -> PROCESSING is what makes a second
# execution of the same split impossible.
SPLIT_TRANSITIONS: dict[SplitStatus, frozenset[SplitStatus]] = {
    S.PENDING: frozenset({S.PROCESSING, S.CLOSED}),
    S.PROCESSING: frozenset({S.SUCCESS, S.PARTIAL, S.FAILED}),
    S.SUCCESS: frozenset(),
    S.PARTIAL: frozenset(),
    S.FAILED: frozenset(),
    S.CLOSED: frozenset(),
}

SPLIT_ITEM_TRANSITIONS: dict[SplitItemStatus, frozenset[SplitItemStatus]] = {
    SI.PENDING: frozenset({SI.PROCESSING}),
    SI.PROCESSING: frozenset({SI.SUCCESS, SI.FAILED, SI.UNKNOWN}),
    SI.UNKNOWN: frozenset({SI.SUCCESS, SI.FAILED}),
    SI.SUCCESS: frozenset(),
    SI.FAILED: frozenset(),
}


def _table(t: dict[Any, frozenset[Any]]) -> dict[str, frozenset[str]]:
    return {k.value: frozenset(v.value for v in vs) for k, vs in t.items()}


TRANSITIONS: dict[Entity, dict[str, frozenset[str]]] = {
    Entity.PAYMENT: {
        k.value: frozenset(v.value for v in vs) for k, vs in PAYMENT_TRANSITIONS.items()
    },
    Entity.INSTRUCTION: {
        k.value: frozenset(v.value for v in vs) for k, vs in INSTRUCTION_TRANSITIONS.items()
    },
    # a refund moves exactly like a payment (DESIGN.md: "Payment (and refund)")
    Entity.REFUND: _table(PAYMENT_TRANSITIONS),
    Entity.SPLIT: _table(SPLIT_TRANSITIONS),
    Entity.SPLIT_ITEM: _table(SPLIT_ITEM_TRANSITIONS),
}

# An instruction in one of these may still move money: at most one per owner (enforced by the
# database), and while one exists no new instruction may be written for that owner.
LIVE_INSTRUCTION = frozenset({I.PENDING, I.PROCESSING, I.UNKNOWN})
TERMINAL_PAYMENT = frozenset({P.SUCCESS, P.CLOSED})
# Only from INIT may a payment get a new instruction (and INIT is reached only from FAILED).
SENDABLE_PAYMENT = frozenset({P.INIT})


def check(entity: Entity, frm: str, to: str) -> None:
    """Raise IllegalTransition unless `frm -> to` is in `entity`'s table."""
    if to not in TRANSITIONS[entity].get(frm, frozenset()):
        raise IllegalTransition(entity.value, frm, to)


def allowed(entity: Entity, frm: str) -> frozenset[str]:
    return TRANSITIONS[entity].get(frm, frozenset())


def split_outcome(items: list[str]) -> SplitStatus | None:
    """The total's final status once every item is terminal; None while any is not."""
    if any(s not in (SI.SUCCESS, SI.FAILED) for s in items):
        return None
    if all(s == SI.SUCCESS for s in items):
        return S.SUCCESS
    return S.FAILED if all(s == SI.FAILED for s in items) else S.PARTIAL


def payment_status_for(instruction: InstructionStatus) -> PaymentStatus:
    """What a payment in flight becomes when its live instruction reaches `instruction`."""
    return {
        I.SUCCESS: P.SUCCESS,
        I.FAILED: P.FAILED,
        I.UNKNOWN: P.UNKNOWN,
        I.PROCESSING: P.PROCESSING,
        I.PENDING: P.PROCESSING,
    }[instruction]
