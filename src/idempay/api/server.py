"""`idempay serve`: build the container (the schema is created or upgraded on start), then serve
the API with uvicorn until SIGINT/SIGTERM, letting requests in flight finish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import structlog
import uvicorn
import uvloop

from idempay import bootstrap
from idempay.api.app import create_app
from idempay.config import Settings

log = structlog.get_logger(__name__)

SHUTDOWN_MARGIN_S = 5.0


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM/SIGINT once it has shut down, which would kill the process
    before the container is closed; stop gracefully, then return normally instead."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            getattr(self, "_captured_signals", []).clear()


async def serve(settings: Settings, *, host: str, port: int) -> None:
    container = await bootstrap.build(settings)
    try:
        config = uvicorn.Config(
            create_app(container),
            host=host,
            port=port,
            lifespan="off",
            log_config=None,
            access_log=False,  # the API logs every request itself, with its request id
            server_header=False,
            http="httptools",  # C parser: h11's pure-Python parsing is a large share of a request
            # longer than clients' keep-alive (httpx: 5 s), so a reused connection is never
            # closed under a request already on its way
            timeout_keep_alive=75,
            # a request in flight holds a channel call: let it finish and record its outcome
            timeout_graceful_shutdown=int(settings.channel_timeout_s + SHUTDOWN_MARGIN_S),
        )
        log.info("serve.starting", host=host, port=port, channels=sorted(container.channels))
        await _Server(config).serve()
    finally:
        await container.aclose()
        log.info("serve.stopped")


def run(settings: Settings, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    # uvloop: the event loop's own cost per request and per database round trip, in C
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(settings, host=host, port=port))
