"""The transition tables: terminal states are sinks, and nothing in flight sends again."""

from __future__ import annotations

import itertools
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from idempay.domain import states
from idempay.domain.errors import IllegalTransition
from idempay.domain.states import (
    LIVE_INSTRUCTION,
    SENDABLE_PAYMENT,
    TERMINAL_PAYMENT,
    Entity,
    InstructionStatus,
    PaymentStatus,
)

P, I = PaymentStatus, InstructionStatus


class PaymentLifecycle(RuleBasedStateMachine):
    """Drives a payment and its instructions only through the tables; a new instruction may be
    sent only where the domain says a payment is sendable."""

    def __init__(self) -> None:
        super().__init__()
        self.status = P.PROCESSING  # created with its first instruction written
        self.instructions: list[InstructionStatus] = [I.PENDING]
        self.history: list[PaymentStatus] = [P.PROCESSING]
        self.sent_while_in_flight = 0

    @rule(to=st.sampled_from(list(PaymentStatus)))
    def move_payment(self, to: PaymentStatus) -> None:
        if self.status is P.INIT and to is P.PROCESSING:
            return  # INIT -> PROCESSING happens only by writing an instruction: the rule below
        allowed = to in states.allowed(Entity.PAYMENT, self.status)
        if not allowed:
            with pytest.raises(IllegalTransition):
                states.check(Entity.PAYMENT, self.status, to)
            return
        states.check(Entity.PAYMENT, self.status, to)
        if to in (P.SUCCESS, P.FAILED) and self.instructions[-1] in LIVE_INSTRUCTION:
            self.instructions[-1] = I(to.value)  # the payment follows its instruction
        self.status = to
        self.history.append(to)

    @rule(to=st.sampled_from(list(InstructionStatus)))
    def move_instruction(self, to: InstructionStatus) -> None:
        frm = self.instructions[-1]
        if to in states.allowed(Entity.INSTRUCTION, frm):
            states.check(Entity.INSTRUCTION, frm, to)
            self.instructions[-1] = to
        else:
            with pytest.raises(IllegalTransition):
                states.check(Entity.INSTRUCTION, frm, to)

    @precondition(lambda self: self.status in SENDABLE_PAYMENT)
    @rule()
    def send_new_instruction(self) -> None:
        if self.status in (P.PROCESSING, P.UNKNOWN):
            self.sent_while_in_flight += 1
        states.check(Entity.PAYMENT, self.status, P.PROCESSING)
        self.status = P.PROCESSING
        self.history.append(P.PROCESSING)
        self.instructions.append(I.PENDING)

    @invariant()
    def terminal_states_are_sinks(self) -> None:
        for i, s in enumerate(self.history):
            if s in TERMINAL_PAYMENT:
                assert self.history[i:] == [s] * (len(self.history) - i)

    @invariant()
    def nothing_in_flight_sends_again(self) -> None:
        assert self.sent_while_in_flight == 0

    @invariant()
    def at_most_one_live_instruction(self) -> None:
        assert sum(s in LIVE_INSTRUCTION for s in self.instructions) <= 1

    @invariant()
    def every_resend_follows_a_failure(self) -> None:
        for i, s in enumerate(self.history):
            if s is P.INIT:
                assert self.history[i - 1] is P.FAILED


TestPaymentLifecycle = PaymentLifecycle.TestCase


def _paths_to(target: PaymentStatus, start: PaymentStatus) -> list[list[str]]:
    found, queue = [], deque([[start.value]])
    while queue:
        path = queue.popleft()
        for nxt in states.allowed(Entity.PAYMENT, path[-1]):
            if nxt in path:
                continue
            if nxt == target:
                found.append([*path, nxt])
            else:
                queue.append([*path, nxt])
    return found


@pytest.mark.parametrize("start", [P.PROCESSING, P.UNKNOWN])
def test_every_path_from_in_flight_to_a_new_attempt_passes_through_failed(
    start: PaymentStatus,
) -> None:
    paths = _paths_to(P.INIT, start)
    assert paths, "a failed payment can be retried"
    assert all(path[-2] == P.FAILED for path in paths)


@pytest.mark.parametrize("terminal", [P.SUCCESS, P.CLOSED])
def test_success_and_closed_have_no_way_out(terminal: PaymentStatus) -> None:
    for to in PaymentStatus:
        with pytest.raises(IllegalTransition):
            states.check(Entity.PAYMENT, terminal, to)


def test_a_timeout_is_never_a_failure_of_the_instruction() -> None:
    assert I.FAILED not in states.allowed(Entity.INSTRUCTION, I.SUCCESS)
    assert states.payment_status_for(I.UNKNOWN) is P.UNKNOWN


TERMINAL = {
    Entity.REFUND: {"SUCCESS", "CLOSED"},
    Entity.SPLIT: {"SUCCESS", "PARTIAL", "FAILED", "CLOSED"},
    Entity.SPLIT_ITEM: {"SUCCESS", "FAILED"},
}
STARTS = {Entity.REFUND: "PROCESSING", Entity.SPLIT: "PENDING", Entity.SPLIT_ITEM: "PENDING"}


class MoneyOutLifecycle(RuleBasedStateMachine):
    """A refund, a split total and one split item, each driven only through its table."""

    def __init__(self) -> None:
        super().__init__()
        self.status = dict(STARTS)
        self.history: dict[Entity, list[str]] = {e: [s] for e, s in STARTS.items()}

    @rule(
        entity=st.sampled_from(list(STARTS)),
        to=st.sampled_from(sorted({s for t in states.TRANSITIONS.values() for s in t})),
    )
    def move(self, entity: Entity, to: str) -> None:
        frm = self.status[entity]
        if to in states.allowed(entity, frm):
            states.check(entity, frm, to)
            self.status[entity] = to
            self.history[entity].append(to)
        else:
            with pytest.raises(IllegalTransition):
                states.check(entity, frm, to)

    @invariant()
    def terminal_states_are_sinks(self) -> None:
        for entity, seen in self.history.items():
            for i, s in enumerate(seen):
                if s in TERMINAL[entity]:
                    assert seen[i:] == [s] * (len(seen) - i)

    @invariant()
    def a_split_executes_at_most_once(self) -> None:
        assert self.history[Entity.SPLIT].count("PROCESSING") <= 1
        assert self.history[Entity.SPLIT_ITEM].count("PROCESSING") <= 1

    @invariant()
    def a_refund_never_leaves_flight_except_by_evidence(self) -> None:
        seen = self.history[Entity.REFUND]
        for a, b in itertools.pairwise(seen):
            if a in ("PROCESSING", "UNKNOWN"):
                assert b in ("SUCCESS", "FAILED", "UNKNOWN")


TestMoneyOutLifecycle = MoneyOutLifecycle.TestCase


@given(
    st.lists(
        st.sampled_from(["SUCCESS", "FAILED", "UNKNOWN", "PROCESSING"]), min_size=1, max_size=50
    )
)
def test_a_split_total_settles_only_when_every_item_is_final(items: list[str]) -> None:
    total = states.split_outcome(items)
    if any(s not in ("SUCCESS", "FAILED") for s in items):
        assert total is None
    elif set(items) == {"SUCCESS"}:
        assert total == "SUCCESS"
    elif set(items) == {"FAILED"}:
        assert total == "FAILED"
    else:
        assert total == "PARTIAL"
