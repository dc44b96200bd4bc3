"""The resolution worker: UNKNOWN and crashed instructions are resolved by query, never resent."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, update
from structlog.testing import capture_logs

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.domain.states import Entity
from idempay.services.reviews import Reviews
from idempay.storage import tables as t
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


def count_transactions(c: bootstrap.Container) -> list[int]:
    """How many transactions the container's store begins from now on (one-element list)."""
    begun = [0]

    def on_begin(_conn: object) -> None:
        begun[0] += 1

    event.listen(c.engine.sync_engine, "begin", on_begin)
    return begun


async def test_a_claimed_batch_is_recorded_in_one_transaction(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    inner.default = Behavior.HALF_OPEN
    for i in range(4):
        await c.payments.charge(merchant, cmd(f"PAY_{i}"))
    inner.default = Behavior.PENDING
    await c.payments.charge(merchant, cmd("PAY_PENDING"))  # the channel is still at it
    clock.advance(3)
    begun = count_transactions(c)
    assert await resolver(c).run_once() == 5
    assert begun == [2]  # the claim, then every answer together (not one per instruction)
    for i in range(4):
        assert await status(c, merchant, f"PAY_{i}") == ("SUCCESS", "SUCCESS")
    [pending] = (await c.payments.get(merchant, "PAY_PENDING")).instructions
    assert (pending.status, pending.query_count, pending.lease_owner) == ("PROCESSING", 1, None)
    assert pending.last_error == "channel: still processing"


async def test_one_instruction_that_cannot_be_recorded_does_not_lose_the_others(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    inner.default = Behavior.HALF_OPEN
    for biz_no in ("PAY_A", "PAY_B", "PAY_C"):
        await c.payments.charge(merchant, cmd(biz_no))
    async with c.engine.begin() as conn:  # a defect: B's payment moved without its instruction
        await conn.execute(
            update(t.payments).where(t.payments.c.biz_no == "PAY_B").values(status="FAILED")
        )
    clock.advance(3)
    begun = count_transactions(c)
    with capture_logs() as logs:
        assert await resolver(c).run_once() == 3  # no exception: the batch is retried one by one
    assert begun == [1 + 1 + 3]  # the claim, the batch (rolled back), each on its own
    assert await status(c, merchant, "PAY_A") == ("SUCCESS", "SUCCESS")
    assert await status(c, merchant, "PAY_C") == ("SUCCESS", "SUCCESS")
    [b] = (await c.payments.get(merchant, "PAY_B")).instructions
    assert (b.status, b.query_count, b.lease_owner) == ("UNKNOWN", 0, "w1")  # held till its lease
    failed = [e for e in logs if e["event"] == "resolution.record_failed"]
    assert [e["request_id"] for e in failed] == [b.request_id]
    applied = [e for e in logs if e["event"] == "resolution.applied"]
    assert len(applied) == 2 and all(e["result"] == "APPLIED" for e in applied)


async def test_a_stale_batch_from_a_worker_whose_lease_expired_changes_nothing(
    c: bootstrap.Container,
    merchant: str,
    inner: ScriptedChannel,
    wrapped: Wrapped,
    clock: ManualClock,
) -> None:
    """A hears every answer of its batch, stalls; B takes the batch over and records it; A's
    batch then comes in: not one write, not one transition more."""
    inner.default = Behavior.HALF_OPEN
    for i in range(3):
        await c.payments.charge(merchant, cmd(f"PAY_{i}"))
    inner.default = Behavior.PENDING
    await c.payments.charge(merchant, cmd("PAY_3"))
    clock.advance(3)
    gate = wrapped.query_gate = asyncio.Event()
    a = asyncio.create_task(resolver(c, "A").run_once())
    while len(wrapped.queries) < 4:
        await asyncio.sleep(0.01)
    clock.advance(61)  # A's lease is over
    wrapped.query_gate = None
    assert await resolver(c, "B").run_once() == 4
    views = [await c.payments.get(merchant, f"PAY_{i}") for i in range(4)]
    after_b = [await c.store.get_instruction(v.instructions[0].request_id) for v in views]
    with capture_logs() as logs:
        gate.set()
        assert await a == 4
    assert [await c.store.get_instruction(v.instructions[0].request_id) for v in views] == after_b
    for view in views[:3]:
        log = await c.store.transition_log(Entity.INSTRUCTION, view.instructions[0].request_id)
        assert [r["to_status"] for r in log].count("SUCCESS") == 1
        assert log[-1]["actor"] == "worker:B"
    results = sorted(e.get("result", e["event"]) for e in logs if e["event"].startswith("res"))
    assert results == ["SAME", "SAME", "SAME", "resolution.stale_answer_dropped"]
