"""Several workers on one PostgreSQL share the queue: each instruction queried once at a time."""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy import func, select, update

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.config import Settings
from idempay.storage import tables as t
from tests.integration.settlement_helpers import Wrapped, cmd

N = 500


async def test_two_workers_over_500_unknown_resolve_each_once_never_concurrently(
    postgres_url: str,
) -> None:
    inner = ScriptedChannel("scripted", default=Behavior.HALF_OPEN)
    channel = Wrapped(inner, query_delay_s=0.002)
    c = await bootstrap.build(Settings(database_url=postgres_url), channels={"scripted": channel})
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    sem = asyncio.Semaphore(16)

    async def charge(i: int) -> None:
        async with sem:
            await c.payments.charge(merchant, cmd(f"PAY_{i:04d}", amount=100 + i))

    await asyncio.gather(*(charge(i) for i in range(N)))
    async with c.engine.begin() as conn:  # all due now
        await conn.execute(update(t.instructions).values(next_query_at=c.clock.now()))
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        async def go() -> None:
            w = await bootstrap.build(
                Settings(database_url=postgres_url, worker_lease_s=120),
                channels={"scripted": channel},
                run_migrations=False,
            )
            resolver = bootstrap.build_worker(w, name).resolver
            barrier.wait()
            while await resolver.run_once():
                pass
            await w.aclose()

        asyncio.run(go())

    threads = [threading.Thread(target=work, args=(n,)) for n in ("A", "B")]
    await asyncio.to_thread(
        lambda: ([th.start() for th in threads], [th.join(300) for th in threads])
    )
    assert channel.overlaps == []
    assert len(channel.queries) == N and len(set(channel.queries)) == N
    async with c.engine.connect() as conn:
        q = select(t.payments.c.status, func.count()).group_by(t.payments.c.status)
        assert dict((await conn.execute(q)).all()) == {"SUCCESS": N}
        q = select(t.instructions.c.lease_owner, func.count()).group_by(
            t.instructions.c.lease_owner
        )
        assert dict((await conn.execute(q)).all()) == {None: N}
        q = (
            select(func.count())
            .select_from(t.transitions)
            .where(t.transitions.c.actor.like("worker:%"))
        )
        by_worker = (await conn.execute(q)).scalar_one()
        q = select(t.transitions.c.actor).distinct().where(t.transitions.c.actor.like("worker:%"))
        actors = set((await conn.execute(q)).scalars())
    assert by_worker == 2 * N  # one instruction row + one payment row each, no more
    assert actors == {"worker:A", "worker:B"}  # both took part
    assert inner.calls == N  # nothing was sent again
    await c.aclose()
