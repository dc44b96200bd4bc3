"""Callbacks: deduplicated by notify_id, checked against the instruction, applied by CAS."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import func, select

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelAnswer, ChannelNotification, ChannelOp, ChannelStatus
from idempay.domain.states import Entity
from idempay.services.callbacks import Callbacks
from idempay.storage import tables as t
from tests.integration.settlement_helpers import Wrapped, build, cmd


@pytest.fixture
def inner() -> ScriptedChannel:
    return ScriptedChannel("scripted")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def c(database_url: str, inner: ScriptedChannel, clock: ManualClock):  # type: ignore[no-untyped-def]
    container = await build(database_url, Wrapped(inner), clock)
    yield container
    await container.aclose()


@pytest.fixture
async def merchant(c: bootstrap.Container) -> str:
    mid, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    return mid


def note(
    request_id: str,
    status: str = "SUCCESS",
    notify_id: str = "n1",
    amount: int = 19900,
    currency: str = "CNY",
) -> ChannelNotification:
    return ChannelNotification(
        notify_id, request_id, OpKind.PAY, ChannelStatus(status), amount, currency
    )


async def rows(c: bootstrap.Container, table: t.Table, **where: object) -> int:
    q = select(func.count()).select_from(table).where(*(table.c[k] == v for k, v in where.items()))
    async with c.engine.connect() as conn:
        return int((await conn.execute(q)).scalar_one())


async def processing(c: bootstrap.Container, merchant: str, inner: ScriptedChannel) -> str:
    inner.plan(Behavior.PENDING)
    view = (await c.payments.charge(merchant, cmd())).view
    assert view.payment.status == "PROCESSING"
    return view.instructions[0].request_id


async def test_a_duplicate_callback_is_acknowledged_and_applied_once(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    rid = await processing(c, merchant, inner)
    callbacks = Callbacks(c.store)
    assert await callbacks.receive("scripted", note(rid)) == "APPLIED"
    assert await callbacks.receive("scripted", note(rid)) == "DUPLICATE"
    assert await callbacks.receive("scripted", note(rid, notify_id="n2")) == "NOOP"
    payment = (await c.payments.get(merchant, "PAY_1")).payment
    assert payment.status == "SUCCESS"
    log = await c.store.transition_log(Entity.PAYMENT, payment.id)
    assert [r["to_status"] for r in log].count("SUCCESS") == 1
    assert await rows(c, t.outbox, kind="payment.success") == 1


async def test_twenty_concurrent_duplicates_make_one_transition_and_one_event(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, database_url: str
) -> None:
    rid = await processing(c, merchant, inner)
    barrier = threading.Barrier(20)
    results: list[object] = []

    def deliver() -> None:
        async def go() -> str:
            other = await bootstrap.build(
                Settings(database_url=database_url),
                channels={},
                run_migrations=False,
                null_pool=True,
            )
            try:
                barrier.wait()
                return await Callbacks(other.store).receive("scripted", note(rid))
            finally:
                await other.aclose()

        try:
            results.append(asyncio.run(go()))
        except BaseException as e:
            results.append(e)

    threads = [threading.Thread(target=deliver) for _ in range(20)]
    await asyncio.to_thread(
        lambda: ([th.start() for th in threads], [th.join(60) for th in threads])
    )
    assert sorted(map(str, results)) == ["APPLIED"] + ["DUPLICATE"] * 19
    assert await rows(c, t.outbox, kind="payment.success") == 1
    assert await rows(c, t.transitions, entity_id=rid, to_status="SUCCESS") == 1


@pytest.mark.parametrize("tamper", [{"amount": 1}, {"currency": "USD"}])
async def test_a_callback_with_another_amount_is_not_applied_and_is_recorded(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, tamper: dict[str, object]
) -> None:
    rid = await processing(c, merchant, inner)
    result = await Callbacks(c.store).receive("scripted", note(rid, **tamper))  # type: ignore[arg-type]
    assert result == "DISCREPANCY"
    assert (await c.payments.get(merchant, "PAY_1")).payment.status == "PROCESSING"
    assert await rows(c, t.discrepancies, request_id=rid, **{"class": "AMOUNT_MISMATCH"}) == 1


async def test_a_callback_for_an_unknown_request_is_kept_as_a_discrepancy(
    c: bootstrap.Container,
) -> None:
    assert await Callbacks(c.store).receive("scripted", note("req_nobody")) == "DISCREPANCY"
    assert await rows(c, t.discrepancies, **{"class": "UNKNOWN_REQUEST"}) == 1
    assert await rows(c, t.callback_inbox, request_id="req_nobody") == 1


@pytest.mark.parametrize("own_answer", [Behavior.SUCCEED, Behavior.HALF_OPEN])
async def test_a_callback_before_the_charges_own_answer_ends_consistent(
    database_url: str, clock: ManualClock, own_answer: Behavior
) -> None:
    inner = ScriptedChannel("scripted")
    inner.plan(own_answer)
    holder: dict[str, bootstrap.Container] = {}

    class CallbackFirst(Wrapped):
        async def execute(self, op: ChannelOp) -> ChannelAnswer:
            try:
                return await self.inner.execute(op)
            finally:  # the bank's callback overtakes its own answer
                n = note(op.request_id)
                assert await Callbacks(holder["c"].store).receive("scripted", n) == "APPLIED"

    c = holder["c"] = await build(database_url, CallbackFirst(inner), clock)
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    view = (await c.payments.charge(merchant, cmd())).view
    assert (view.payment.status, view.instructions[0].status) == ("SUCCESS", "SUCCESS")
    log = await c.store.transition_log(Entity.PAYMENT, view.payment.id)
    assert [r["to_status"] for r in log] == ["PROCESSING", "SUCCESS"]
    await c.aclose()


async def test_a_late_callback_after_the_worker_resolved_is_a_noop_or_a_discrepancy(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    inner.plan(Behavior.HALF_OPEN)
    rid = (await c.payments.charge(merchant, cmd())).view.instructions[0].request_id
    clock.advance(5)
    await bootstrap.build_worker(c, "w").resolver.run_once()
    callbacks = Callbacks(c.store)
    assert await callbacks.receive("scripted", note(rid)) == "NOOP"
    assert await callbacks.receive("scripted", note(rid, "FAILED", "n9")) == "DISCREPANCY"
    assert (await c.payments.get(merchant, "PAY_1")).payment.status == "SUCCESS"
    assert await rows(c, t.discrepancies, request_id=rid, **{"class": "CONTRADICTS_TERMINAL"}) == 1
