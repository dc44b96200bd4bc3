"""The worker's chores: resolution priority (seeds/001) and the daily reconciliation schedule."""

from __future__ import annotations

from datetime import UTC, datetime, time

import pytest
from sqlalchemy import func, select, update

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.services.resolution import ResolutionPolicy
from idempay.storage import tables as t
from idempay.worker import Worker
from tests.integration.settlement_helpers import build, cmd


def test_urgent_instructions_never_wait_longer_than_the_cap() -> None:
    policy = ResolutionPolicy()
    assert policy.delay_after(20) == 900  # ordinary: the 15-minute cadence
    assert policy.delay_after(20, urgent=True) == 60
    assert policy.delay_after(1, urgent=True) == 2  # the early steps stay as they are
    assert policy.urgent(1_000_000, 0.0) and policy.urgent(1, 0.05)
    assert not policy.urgent(999_999, 0.049)


async def test_merchants_with_many_unknowns_are_claimed_first(database_url: str) -> None:
    clock = ManualClock()
    channel = ScriptedChannel("scripted", default=Behavior.HALF_OPEN)
    c = await build(database_url, channel, clock)
    calm, _ = await bootstrap.create_principal(c.store, "calm", operator=False)
    hot, _ = await bootstrap.create_principal(c.store, "hot", operator=False)
    await c.payments.charge(calm, cmd("BIG", amount=9_000_000))
    for i in range(2):
        await c.payments.charge(hot, cmd(f"SMALL_{i}", amount=100))
    channel.default = Behavior.SUCCEED
    for i in range(30):  # the calm merchant's other payments all went through
        await c.payments.charge(calm, cmd(f"OK_{i}"))
    clock.advance(10)
    worker = Worker(c, "w")
    worker.parts.resolver.policy = ResolutionPolicy(batch=2)
    await worker.refresh_rates()
    rates = worker.parts.resolver.unknown_rates
    assert rates[hot] == 1.0 and rates[calm] == pytest.approx(1 / 31)
    first = await worker.parts.queue.claim_instructions(
        worker="w", lease_s=60, limit=2, favour=worker.parts.resolver.hot_merchants()
    )
    assert {i.merchant_id for i in first} == {hot}  # before the bigger amount of a calm merchant
    await c.aclose()


async def test_the_daily_reconciliation_runs_once_per_channel_and_day(database_url: str) -> None:
    clock = ManualClock(datetime(2026, 11, 30, 0, 10, tzinfo=UTC))
    c = await build(database_url, ScriptedChannel("scripted"), clock, reconcile_at=time(0, 30))

    async def runs() -> list[tuple[str, str]]:
        async with c.engine.connect() as conn:
            q = select(t.reconciliation_runs.c.day, t.reconciliation_runs.c.status)
            return [tuple(r) for r in (await conn.execute(q)).all()]  # type: ignore[misc]

    a, b = Worker(c, "a"), Worker(c, "b")
    await a.daily_reconciliation()
    assert await runs() == []  # not before 00:30 UTC
    clock.advance(30 * 60)
    await a.daily_reconciliation()
    await b.daily_reconciliation()  # another worker: the day is taken
    await a.daily_reconciliation()
    for task in list(a.background):
        await task
    assert await runs() == [("2026-11-29", "DONE")]
    await c.aclose()


async def test_the_worker_purges_expired_idempotency_keys(database_url: str) -> None:
    clock = ManualClock()
    c = await build(database_url, ScriptedChannel("scripted"), clock)
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    from idempay.services.idempotency import KeyedRequest

    keyed = KeyedRequest(merchant, "k1", "f" * 64)
    await c.payments.charge(merchant, cmd(), on_create=c.idempotency.claim(keyed))
    async with c.engine.begin() as conn:
        await conn.execute(update(t.idempotency_keys).values(expires_at=clock.now()))
    await Worker(c, "w").purge_idempotency_keys()
    async with c.engine.connect() as conn:
        assert (
            await conn.execute(select(func.count()).select_from(t.idempotency_keys))
        ).scalar_one() == 0
    await c.aclose()
