"""Refunds and splits: reservations that can never over-spend, splits that execute once."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import event, func, select

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.domain.errors import BizNoReused, InsufficientBalance, InvalidRequest, InvalidState
from idempay.domain.model import OpKind
from idempay.services.refunds import RefundCommand, Refunds
from idempay.services.sending import PaymentPolicy
from idempay.services.splits import Receiver, SplitCommand, Splits
from idempay.storage import tables as t
from tests.integration.settlement_helpers import Wrapped, build, cmd

AMOUNT = 10_000


@pytest.fixture
def inner() -> ScriptedChannel:
    return ScriptedChannel("scripted")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def c(database_url: str, inner: ScriptedChannel, clock: ManualClock):  # type: ignore[no-untyped-def]
    container = await build(database_url, Wrapped(inner), clock, not_found_grace_s=10.0)
    yield container
    await container.aclose()


def services(c: bootstrap.Container) -> tuple[Refunds, Splits]:
    policy = PaymentPolicy(channel_timeout_s=2.0)
    return (
        Refunds(c.store, c.channels, c.clock, policy),
        Splits(c.store, c.channels, c.clock, policy),
    )


@pytest.fixture
async def paid(c: bootstrap.Container) -> str:
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    result = await c.payments.charge(merchant, cmd("PAY_1", amount=AMOUNT))
    assert result.view.payment.status == "SUCCESS"
    return merchant


async def balances(c: bootstrap.Container, merchant: str) -> tuple[int, int, int]:
    p = (await c.payments.get(merchant, "PAY_1")).payment
    return p.refunded_amount, p.split_amount, p.reserved_amount


def split(split_no: str = "SPL_1", *amounts: int) -> SplitCommand:
    amounts = amounts or (3000, 7000)
    return SplitCommand(
        split_no, "PAY_1", tuple(Receiver(f"r{i}", a) for i, a in enumerate(amounts))
    )


async def test_a_refund_reserves_then_moves_the_amount_to_refunded(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel
) -> None:
    refunds, _ = services(c)
    result = await refunds.create(paid, RefundCommand("RF_1", "PAY_1", 2500))
    assert (result.created, result.view.refund.status) == (True, "SUCCESS")
    assert await balances(c, paid) == (2500, 0, 0)
    again = await refunds.create(paid, RefundCommand("RF_1", "PAY_1", 2500))
    assert again.replayed and len(inner.executions(kind=OpKind.REFUND)) == 1
    with pytest.raises(BizNoReused):
        await refunds.create(paid, RefundCommand("RF_1", "PAY_1", 2600))


async def test_a_failed_refund_releases_its_reservation(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel
) -> None:
    refunds, _ = services(c)
    inner.plan(Behavior.DECLINE)
    assert (
        await refunds.create(paid, RefundCommand("RF_1", "PAY_1", AMOUNT))
    ).view.refund.status == "FAILED"
    assert await balances(c, paid) == (0, 0, 0)
    assert (
        await refunds.create(paid, RefundCommand("RF_2", "PAY_1", AMOUNT))
    ).view.refund.status == "SUCCESS"


async def test_an_unknown_refund_keeps_its_reservation_until_resolved(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    refunds, _ = services(c)
    inner.plan(Behavior.HALF_OPEN)
    assert (
        await refunds.create(paid, RefundCommand("RF_1", "PAY_1", 6000))
    ).view.refund.status == "UNKNOWN"
    assert await balances(c, paid) == (0, 0, 6000)
    with pytest.raises(InsufficientBalance):
        await refunds.create(paid, RefundCommand("RF_2", "PAY_1", 5000))
    clock.advance(5)
    await bootstrap.build_worker(c, "w").resolver.run_once()
    assert (await refunds.get(paid, "RF_1")).refund.status == "SUCCESS"
    assert await balances(c, paid) == (6000, 0, 0)


async def test_two_unknown_refunds_of_one_payment_in_one_batch_are_recorded_one_after_the_other(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel, clock: ManualClock
) -> None:
    """A batch's transaction takes one instruction per payment (each payment's rows locked once,
    right after its instruction, as callbacks lock them): the second refund comes next."""
    refunds, _ = services(c)
    inner.plan(Behavior.HALF_OPEN, Behavior.HALF_OPEN)
    for refund_no, amount in (("RF_1", 6000), ("RF_2", 3000)):
        assert (
            await refunds.create(paid, RefundCommand(refund_no, "PAY_1", amount))
        ).view.refund.status == "UNKNOWN"
    clock.advance(5)
    begun = [0]

    def on_begin(_conn: object) -> None:
        begun[0] += 1

    event.listen(c.engine.sync_engine, "begin", on_begin)
    assert await bootstrap.build_worker(c, "w").resolver.run_once() == 2
    assert begun == [1 + 2]  # the claim, then one transaction per refund of the payment
    for refund_no in ("RF_1", "RF_2"):
        assert (await refunds.get(paid, refund_no)).refund.status == "SUCCESS"
    assert await balances(c, paid) == (9000, 0, 0)


async def test_refunds_and_splits_need_a_paid_payment(
    c: bootstrap.Container, inner: ScriptedChannel
) -> None:
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    inner.plan(Behavior.HALF_OPEN)
    await c.payments.charge(merchant, cmd("PAY_1", amount=AMOUNT))
    refunds, splits = services(c)
    with pytest.raises(InvalidState):
        await refunds.create(merchant, RefundCommand("RF_1", "PAY_1", 100))
    with pytest.raises(InvalidState):
        await splits.create(merchant, split())


async def test_a_split_above_the_available_amount_writes_nothing(
    c: bootstrap.Container, paid: str
) -> None:
    refunds, splits = services(c)
    await refunds.create(paid, RefundCommand("RF_1", "PAY_1", 4000))
    with pytest.raises(InsufficientBalance):
        await splits.create(paid, split("SPL_1", 3000, 3001))
    async with c.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(t.splits))).scalar_one() == 0
        assert (
            await conn.execute(select(func.count()).select_from(t.split_items))
        ).scalar_one() == 0
    assert await balances(c, paid) == (4000, 0, 0)


@pytest.mark.parametrize(
    "receivers",
    [
        (),
        tuple(Receiver(f"r{i}", 1) for i in range(51)),
        (Receiver("a", 1), Receiver("a", 2)),
        (Receiver("a", 0),),
        (Receiver("a", -1),),
        (Receiver("bad id", 1),),
    ],
)
async def test_bad_receivers_are_refused(
    c: bootstrap.Container, paid: str, receivers: tuple[Receiver, ...]
) -> None:
    _, splits = services(c)
    with pytest.raises(InvalidRequest):
        await splits.create(paid, SplitCommand("SPL_1", "PAY_1", receivers))


async def test_a_3_7_split_pays_each_receiver_once(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel
) -> None:
    _, splits = services(c)
    result = await splits.create(paid, split())
    assert result.view.split.status == "SUCCESS"
    assert [(i.receiver_id, i.amount, i.status) for i, _ in result.view.items] == [
        ("r0", 3000, "SUCCESS"),
        ("r1", 7000, "SUCCESS"),
    ]
    assert await balances(c, paid) == (0, 10000, 0)
    again = await splits.create(paid, split())
    assert again.replayed and len(inner.executions(kind=OpKind.SPLIT)) == 2
    with pytest.raises(BizNoReused):
        await splits.create(paid, split("SPL_1", 3000, 6999))


@pytest.mark.parametrize(("at_channel", "final"), [("SUCCESS", "SUCCESS"), ("NEVER", "PARTIAL")])
async def test_a_half_open_item_does_not_stop_the_others_and_the_worker_settles_the_total(
    c: bootstrap.Container,
    paid: str,
    inner: ScriptedChannel,
    clock: ManualClock,
    at_channel: str,
    final: str,
) -> None:
    _, splits = services(c)
    second = Behavior.HALF_OPEN if at_channel == "SUCCESS" else Behavior.ERROR
    inner.plan(Behavior.SUCCEED, second, Behavior.SUCCEED)
    view = (await splits.create(paid, split("SPL_1", 1000, 2000, 3000))).view
    assert [i.status for i, _ in view.items] == ["SUCCESS", "UNKNOWN", "SUCCESS"]
    assert view.split.status == "PROCESSING"
    assert await balances(c, paid) == (0, 4000, 2000)
    for _ in range(3):
        clock.advance(15)
        await bootstrap.build_worker(c, "w").resolver.run_once()
    view = await splits.get(paid, "SPL_1")
    assert view.split.status == final
    expected_split = 6000 if final == "SUCCESS" else 4000
    assert await balances(c, paid) == (0, expected_split, 0)


def run_threads(n: int, work: object) -> list[object]:
    barrier = threading.Barrier(n)
    out: list[object] = [None] * n

    def one(i: int) -> None:
        try:
            out[i] = asyncio.run(work(i, barrier))  # type: ignore[operator]
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return out


async def _other(url: str, channel: ScriptedChannel) -> bootstrap.Container:
    return await bootstrap.build(
        Settings(database_url=url),
        channels={"scripted": channel},
        run_migrations=False,
        null_pool=True,
    )


async def test_ten_concurrent_refunds_of_30_percent_accept_exactly_three(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel, database_url: str
) -> None:
    async def refund(i: int, barrier: threading.Barrier) -> str:
        other = await _other(database_url, inner)
        try:
            barrier.wait()
            refunds, _ = services(other)
            return (
                await refunds.create(paid, RefundCommand(f"RF_{i}", "PAY_1", 3000))
            ).view.refund.status
        finally:
            await other.aclose()

    results = await asyncio.to_thread(run_threads, 10, refund)
    assert sorted(map(str, results)).count("SUCCESS") == 3
    assert sum(isinstance(r, InsufficientBalance) for r in results) == 7
    assert sum(e.amount for e in inner.executions(kind=OpKind.REFUND)) == 9000
    assert await balances(c, paid) == (9000, 0, 0)


async def test_refunds_and_splits_racing_never_exceed_the_payment(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel, database_url: str
) -> None:
    async def spend(i: int, barrier: threading.Barrier) -> str:
        other = await _other(database_url, inner)
        try:
            barrier.wait()
            refunds, splits = services(other)
            if i % 2:
                return (
                    await refunds.create(paid, RefundCommand(f"RF_{i}", "PAY_1", 3000))
                ).view.refund.status
            return (await splits.create(paid, split(f"SPL_{i}", 1000, 2000))).view.split.status
        finally:
            await other.aclose()

    results = await asyncio.to_thread(run_threads, 10, spend)
    assert [str(r) for r in results].count("SUCCESS") == 3
    assert sum(isinstance(r, InsufficientBalance) for r in results) == 7
    moved = sum(e.amount for e in inner.ledger if e.kind in ("REFUND", "SPLIT"))
    assert moved == 9000
    refunded, split_amount, reserved = await balances(c, paid)
    assert refunded + split_amount == 9000 and reserved == 0


async def test_eight_concurrent_identical_splits_execute_each_receiver_once(
    c: bootstrap.Container, paid: str, inner: ScriptedChannel, database_url: str
) -> None:
    async def request(_i: int, barrier: threading.Barrier) -> str:
        other = await _other(database_url, inner)
        try:
            barrier.wait()
            _, splits = services(other)
            return (await splits.create(paid, split())).view.split.id
        finally:
            await other.aclose()

    results = await asyncio.to_thread(run_threads, 8, request)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert len(set(results)) == 1
    assert sorted(e.request_id for e in inner.executions(kind=OpKind.SPLIT)) == sorted(
        {e.request_id for e in inner.executions(kind=OpKind.SPLIT)}
    )
    assert len(inner.executions(kind=OpKind.SPLIT)) == 2
    assert await balances(c, paid) == (0, 10000, 0)
