"""`idempay worker`: the loops that resolve UNKNOWN instructions and deliver webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket

import structlog

from idempay import bootstrap
from idempay.config import Settings

log = structlog.get_logger(__name__)


def worker_id() -> str:
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{secrets.token_hex(3)}"


async def run(
    container: bootstrap.Container, *, once: bool, stop: asyncio.Event | None = None
) -> None:
    """Resolve and deliver until stopped. A starting worker also looks once at every open
    question (UNKNOWN / PROCESSING), whatever its backoff says. `once`: until nothing is due."""
    stop = stop or asyncio.Event()
    parts = bootstrap.build_worker(container, worker_id())
    started = container.clock.now()
    log.info("worker.started", worker=parts.resolver.worker_id, once=once)
    try:
        while not stop.is_set():
            resolved = await parts.resolver.run_once(sweep_before=started)
            delivered = await parts.outbox.deliver_due()
            if resolved or delivered:
                continue
            if once:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), container.settings.worker_poll_s)
    finally:
        await parts.sender.aclose()
        log.info("worker.stopped", worker=parts.resolver.worker_id)


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
