"""The resolution worker: UNKNOWN and crashed instructions are resolved by query, never resent."""

from __future__ import annotations

import asyncio

import pytest

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.domain.states import Entity
from idempay.services.reviews import Reviews
from tests.integration.settlement_helpers import (
    Crash,
    Wrapped,
    build,
    cmd,
    crash_after,
    crash_before_sending,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def inner() -> ScriptedChannel:
    return ScriptedChannel("scripted")


@pytest.fixture
def wrapped(inner: ScriptedChannel) -> Wrapped:
    return Wrapped(inner)


@pytest.fixture
async def c(database_url: str, wrapped: Wrapped, clock: ManualClock):  # type: ignore[no-untyped-def]
    container = await build(database_url, wrapped, clock, max_queries=3, not_found_grace_s=60.0)
    yield container
    await container.aclose()


@pytest.fixture
async def merchant(c: bootstrap.Container) -> str:
    mid, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    return mid


def resolver(c: bootstrap.Container, name: str = "w1") -> bootstrap.Resolver:
    return bootstrap.build_worker(c, name).resolver


async def status(c: bootstrap.Container, merchant: str, biz_no: str = "PAY_1") -> tuple[str, ...]:
    view = await c.payments.get(merchant, biz_no)
    return (view.payment.status, *(i.status for i in view.instructions))


async def test_unknown_is_resolved_by_query_without_sending_again(
    c: bootstrap.Container,
    merchant: str,
    inner: ScriptedChannel,
    wrapped: Wrapped,
    clock: ManualClock,
) -> None:
    inner.plan(Behavior.HALF_OPEN)
    await c.payments.charge(merchant, cmd())
    assert await status(c, merchant) == ("UNKNOWN", "UNKNOWN")
    assert await resolver(c).run_once() == 0  # not due before its first backoff step
    clock.advance(3)
    assert await resolver(c).run_once() == 1
    assert await status(c, merchant) == ("SUCCESS", "SUCCESS")
    assert inner.calls == 1 and len(wrapped.queries) == 1
    log = await c.store.transition_log(
        Entity.PAYMENT, (await c.payments.get(merchant, "PAY_1")).payment.id
    )
    assert log[-1]["actor"].startswith("worker:w1") and "query" in log[-1]["reason"]


async def test_a_crash_after_the_channel_executed_is_found_by_query(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    crash_after(inner)
    with pytest.raises(Crash):
        await c.payments.charge(merchant, cmd())
    inner.after_execute = None
    assert await status(c, merchant) == ("PROCESSING", "PENDING")
    clock.advance(10)
    assert await resolver(c).run_once() == 0  # a young PENDING may still be in flight
    clock.advance(25)
    assert await resolver(c).run_once() == 1
    assert await status(c, merchant) == ("SUCCESS", "SUCCESS")
    assert len(inner.executions()) == 1


async def test_never_received_is_closed_at_the_channel_then_failed_and_can_never_execute(
    c: bootstrap.Container,
    merchant: str,
    inner: ScriptedChannel,
    wrapped: Wrapped,
    clock: ManualClock,
) -> None:
    wrapped.before_execute = crash_before_sending
    with pytest.raises(Crash):
        await c.payments.charge(merchant, cmd())
    wrapped.before_execute = None
    clock.advance(31)
    await resolver(c).run_once()  # not found, but within the grace period
    assert await status(c, merchant) == ("PROCESSING", "PENDING")
    clock.advance(30)
    await resolver(c).run_once()
    view = await c.payments.get(merchant, "PAY_1")
    assert (view.payment.status, view.instructions[0].status) == ("FAILED", "FAILED")
    # the closed request_id can never execute later, even if the lost request finally arrives
    from idempay.domain.model import OpKind
    from idempay.domain.ports import ChannelOp

    late = ChannelOp(view.instructions[0].request_id, OpKind.PAY, view.payment.id, 19900, "CNY")
    assert (await inner.execute(late)).status == "FAILED"
    assert inner.executions() == []
    retried = await c.payments.retry(merchant, "PAY_1")
    assert retried.view.payment.status == "SUCCESS" and len(inner.executions()) == 1


async def test_exhausted_queries_open_a_review_the_operator_resolves_it(
    c: bootstrap.Container,
    merchant: str,
    inner: ScriptedChannel,
    wrapped: Wrapped,
    clock: ManualClock,
) -> None:
    inner.plan(Behavior.HALF_OPEN)
    await c.payments.charge(merchant, cmd())
    wrapped.query_error = True
    for _ in range(3):
        clock.advance(1000)
        await resolver(c).run_once()
    [review] = await c.store.list_reviews(status="OPEN", limit=10, before_id=None)
    assert "unresolved after 3 queries" in review["reason"]
    op_id, _ = await bootstrap.create_principal(c.store, "alice", operator=True)
    result = await Reviews(c.store).resolve(
        review["id"], "SUCCESS", "bank statement line 42", op_id
    )
    assert result == "APPLIED"
    assert await status(c, merchant) == ("SUCCESS", "SUCCESS")
    payment_id = (await c.payments.get(merchant, "PAY_1")).payment.id
    last = (await c.store.transition_log(Entity.PAYMENT, payment_id))[-1]
    assert last["actor"] == f"operator:{op_id}" and "bank statement line 42" in last["reason"]
    assert (await c.store.get_review(review["id"]))["status"] == "RESOLVED"  # type: ignore[index]


async def test_a_stale_answer_from_a_worker_whose_lease_expired_is_not_applied(
    c: bootstrap.Container,
    merchant: str,
    inner: ScriptedChannel,
    wrapped: Wrapped,
    clock: ManualClock,
) -> None:
    inner.plan(Behavior.PENDING)  # the channel has it, still processing
    await c.payments.charge(merchant, cmd())
    clock.advance(3)
    gate = wrapped.query_gate = asyncio.Event()
    a = asyncio.create_task(resolver(c, "A").run_once())  # A hears PROCESSING... and stalls
    while not wrapped.queries:
        await asyncio.sleep(0.01)
    [ins] = (await c.payments.get(merchant, "PAY_1")).instructions
    inner.settle(ins.request_id, "SUCCESS")
    clock.advance(61)  # A's lease is over; B takes the instruction and resolves it
    wrapped.query_gate = None
    assert await resolver(c, "B").run_once() == 1
    assert await status(c, merchant) == ("SUCCESS", "SUCCESS")
    after_b = await c.store.get_instruction(ins.request_id)
    gate.set()
    assert await a == 1  # A wakes up with its stale "PROCESSING"
    assert await status(c, merchant) == ("SUCCESS", "SUCCESS")
    assert await c.store.get_instruction(ins.request_id) == after_b  # not even bookkeeping
    log = await c.store.transition_log(Entity.INSTRUCTION, ins.request_id)
    assert [r["to_status"] for r in log].count("SUCCESS") == 1
    assert log[-1]["actor"].startswith("worker:B")
