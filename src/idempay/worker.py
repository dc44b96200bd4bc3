"""`idempay worker`: resolves UNKNOWN instructions, delivers webhooks, runs the daily statement
reconciliation, refreshes the resolution priorities and purges expired Idempotency-Key records."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta

import structlog

from idempay import bootstrap
from idempay.config import Settings

log = structlog.get_logger(__name__)
RATES_EVERY_S = 60.0
PURGE_EVERY_S = 300.0
PURGE_BATCH = 1000


def worker_id() -> str:
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class Every:
    """A job that runs at most once per `seconds` (the first time at once)."""

    seconds: float
    job: Callable[[], Awaitable[object]]
    last: float = field(default=float("-inf"))

    async def tick(self, now: float) -> None:
        if now - self.last >= self.seconds:
            self.last = now
            try:
                await self.job()
            except Exception:  # one failing chore must not stop resolution
                log.exception("worker.job_failed", job=getattr(self.job, "__name__", "?"))


class Worker:
    def __init__(self, container: bootstrap.Container, name: str | None = None) -> None:
        self.c = container
        self.parts = bootstrap.build_worker(container, name or worker_id())
        self.started = container.clock.now()
        self.background: set[asyncio.Task[object]] = set()
        self.chores = [
            Every(RATES_EVERY_S, self.refresh_rates),
            Every(PURGE_EVERY_S, self.purge_idempotency_keys),
            Every(RATES_EVERY_S, self.daily_reconciliation),
        ]

    async def refresh_rates(self) -> None:
        since = self.c.clock.now() - timedelta(days=1)
        self.parts.resolver.unknown_rates = await self.parts.queue.unknown_rates(since)

    async def purge_idempotency_keys(self) -> None:
        await self.c.idempotency.records.purge_expired(self.c.clock.now(), PURGE_BATCH)

    async def daily_reconciliation(self) -> None:
        """Yesterday's statement of every channel, once per day (one worker of many wins it),
        after IDEMPAY_RECONCILE_AT (UTC)."""
        now = self.c.clock.now()
        if now.time() < self.c.settings.reconcile_at:
            return
        day = now.date() - timedelta(days=1)
        for channel in sorted(self.c.channels):
            if not hasattr(self.c.channels[channel], "statement"):
                continue
            run_id = await self.c.reconciliation.start(
                channel, day, schedule_key=f"{channel}:{day}"
            )
            if run_id is None:
                continue  # already run (by this worker or another)
            task = asyncio.create_task(self.c.reconciliation.run(run_id, channel, day))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def step(self) -> int:
        """One round: the chores that are due, one batch of resolution, one of webhooks."""
        loop_now = asyncio.get_running_loop().time()
        for chore in self.chores:
            await chore.tick(loop_now)
        resolved = await self.parts.resolver.run_once(sweep_before=self.started)
        delivered = await self.parts.outbox.deliver_due()
        return resolved + delivered

    async def run(self, *, once: bool, stop: asyncio.Event | None = None) -> None:
        """Until stopped; with `once`, until nothing is due (and background runs finished)."""
        stop = stop or asyncio.Event()
        log.info("worker.started", worker=self.parts.resolver.worker_id, once=once)
        try:
            while not stop.is_set():
                if await self.step():
                    continue
                if once:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.c.settings.worker_poll_s)
            if self.background:
                await asyncio.gather(*self.background, return_exceptions=True)
        finally:
            await self.parts.sender.aclose()
            log.info("worker.stopped", worker=self.parts.resolver.worker_id)


async def run(
    container: bootstrap.Container, *, once: bool, stop: asyncio.Event | None = None
) -> None:
    await Worker(container).run(once=once, stop=stop)


async def main(settings: Settings, *, once: bool) -> None:
    container = await bootstrap.build(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run(container, once=once, stop=stop)
    finally:
        await container.aclose()
