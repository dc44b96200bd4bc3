"""Idempotency-Key records on every database: claimed in the payment's own transaction, replayed,
refused when reused, expired after the TTL, and recovered when their request died."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select

from idempay import bootstrap
from idempay.bootstrap import Container
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.domain.errors import IdempotencyKeyReused, InvalidState, RequestInProgress
from idempay.services.idempotency import KeyedRequest, KeyTaken, Orphaned, Replay
from idempay.services.payments import ChargeCommand
from idempay.storage import tables as t

TTL_S = 3600
IN_FLIGHT_S = 2.0 + bootstrap.IN_FLIGHT_MARGIN_S  # channel_timeout_s + margin


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def container(
    database_url: str, channel: ScriptedChannel, clock: ManualClock
) -> AsyncIterator[Container]:
    settings = Settings(database_url=database_url, channel_timeout_s=2.0, idempotency_ttl_s=TTL_S)
    c = await bootstrap.build(settings, channels={"scripted": channel}, clock=clock)
    yield c
    await c.aclose()


async def count(container: Container, table: t.Table) -> int:
    async with container.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


def cmd(biz_no: str = "PAY_1", amount: int = 100) -> ChargeCommand:
    return ChargeCommand(
        biz_no=biz_no, order_no="ORD1", amount=amount, currency="CNY", channel="scripted"
    )


def req(merchant: str, key: str = "k1", fingerprint: str = "f" * 64) -> KeyedRequest:
    return KeyedRequest(merchant, key, fingerprint)


async def test_a_fresh_key_is_free_and_is_claimed_with_the_payment(
    container: Container, merchant: str
) -> None:
    svc = container.idempotency
    assert await svc.check(req(merchant)) is None
    result = await container.payments.charge(merchant, cmd(), on_create=svc.claim(req(merchant)))
    record = await svc.records.get(merchant, "k1")
    assert record is not None and record.resource_id == result.view.payment.id
    assert record.response_status is None  # claimed, not answered yet
    await svc.answered(req(merchant), 201, '{"id": "x"}')
    assert await svc.check(req(merchant)) == Replay(201, '{"id": "x"}')


async def test_another_request_under_the_same_key_is_refused(
    container: Container, merchant: str
) -> None:
    svc = container.idempotency
    await container.payments.charge(merchant, cmd(), on_create=svc.claim(req(merchant)))
    await svc.answered(req(merchant), 201, "{}")
    with pytest.raises(IdempotencyKeyReused):
        await svc.check(req(merchant, fingerprint="0" * 64))


async def test_an_unanswered_key_is_in_progress_then_orphaned_after_deadline_and_margin(
    container: Container, merchant: str, clock: ManualClock
) -> None:
    svc = container.idempotency
    result = await container.payments.charge(merchant, cmd(), on_create=svc.claim(req(merchant)))
    clock.advance(IN_FLIGHT_S - 0.5)
    with pytest.raises(RequestInProgress):
        await svc.check(req(merchant))
    clock.advance(1.0)
    assert await svc.check(req(merchant)) == Orphaned(result.view.payment.id)


async def test_a_key_is_forgotten_after_its_ttl_and_can_be_used_again(
    container: Container, merchant: str, clock: ManualClock
) -> None:
    svc = container.idempotency
    await container.payments.charge(merchant, cmd(), on_create=svc.claim(req(merchant)))
    await svc.answered(req(merchant), 201, "{}")
    clock.advance(TTL_S + 1)
    assert await svc.check(req(merchant, fingerprint="0" * 64)) is None
    assert await count(container, t.idempotency_keys) == 0
    await container.payments.charge(merchant, cmd("PAY_2"), on_create=svc.claim(req(merchant)))
    assert await count(container, t.payments) == 2


async def test_a_taken_key_rolls_back_the_payment_written_with_it(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    svc = container.idempotency
    await container.payments.charge(merchant, cmd(), on_create=svc.claim(req(merchant)))
    with pytest.raises(KeyTaken):
        await container.payments.charge(
            merchant, cmd("PAY_2"), on_create=svc.claim(req(merchant, fingerprint="0" * 64))
        )
    assert await count(container, t.payments) == 1 and channel.calls == 1


async def test_concurrent_first_uses_of_one_key_let_exactly_one_proceed(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    svc = container.idempotency
    channel.delay_s = 0.05

    async def attempt(n: int) -> str:
        try:
            r = await container.payments.charge(
                merchant, cmd(f"PAY_{n}"), on_create=svc.claim(req(merchant, "race"))
            )
        except KeyTaken:
            return "taken"
        return r.view.payment.id

    outcomes = await asyncio.gather(*(attempt(n) for n in range(10)))
    assert sum(o != "taken" for o in outcomes) == 1
    assert await count(container, t.payments) == 1 and channel.calls == 1


async def test_retry_and_close_claim_the_key_in_their_own_transaction(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    svc = container.idempotency
    channel.plan(Behavior.DECLINE, Behavior.DECLINE)
    await container.payments.charge(merchant, cmd())
    await svc.records.remember(svc._record(req(merchant, "taken"), "pay_x", status=200, body="{}"))
    with pytest.raises(KeyTaken):  # the FAILED -> INIT -> PROCESSING change rolls back
        await container.payments.retry(
            merchant, "PAY_1", on_start=svc.claim(req(merchant, "taken"))
        )
    assert (await container.payments.get(merchant, "PAY_1")).payment.status == "FAILED"
    with pytest.raises(KeyTaken):
        await container.payments.close(
            merchant, "PAY_1", on_close=svc.claim(req(merchant, "taken"))
        )
    assert (await container.payments.get(merchant, "PAY_1")).payment.status == "FAILED"
    closed = await container.payments.close(
        merchant, "PAY_1", on_close=svc.claim(req(merchant, "c"))
    )
    assert closed.payment.status == "CLOSED"
    with pytest.raises(InvalidState):  # not closed twice, and the key is not claimed twice
        await container.payments.close(merchant, "PAY_1", on_close=svc.claim(req(merchant, "d")))
    assert await svc.records.get(merchant, "d") is None


async def test_remember_never_overwrites_and_purge_deletes_only_expired_records(
    container: Container, merchant: str, clock: ManualClock
) -> None:
    svc, records = container.idempotency, container.idempotency.records
    assert await records.remember(svc._record(req(merchant, "a"), "pay_a", status=200, body="1"))
    assert not await records.remember(
        svc._record(req(merchant, "a"), "pay_b", status=201, body="2")
    )
    assert await svc.check(req(merchant, "a")) == Replay(200, "1")
    clock.advance(TTL_S / 2)
    await records.remember(svc._record(req(merchant, "b"), "pay_b", status=200, body="1"))
    clock.advance(TTL_S / 2 + 1)
    assert await records.purge_expired(clock.now(), limit=100) == 1
    assert await records.get(merchant, "a") is None and await records.get(merchant, "b") is not None
