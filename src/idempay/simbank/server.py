"""`idempay simbank`: the simulator built from SIMBANK_DATABASE and SIMBANK_SECRET, served on
asyncio until SIGTERM or SIGINT. `start()` builds one in the running loop (for embedding)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from idempay.simbank.background import Background
from idempay.simbank.bank import Bank
from idempay.simbank.callbacks import Notifier
from idempay.simbank.http import HttpServer, serve
from idempay.simbank.ledger import Ledger
from idempay.simbank.routes import Routes

log = structlog.get_logger("idempay.simbank")

DEFAULT_DATABASE = "./simbank.db"
DEFAULT_SECRET = "simbank-dev-secret"


@dataclass
class Simulator:
    server: HttpServer
    bank: Bank

    @property
    def port(self) -> int:
        return self.server.port

    async def aclose(self) -> None:
        await self.server.aclose()
        await self.bank.background.cancel_all()
        await self.bank.notifier.aclose()
        self.bank.ledger.close_db()


async def start(host: str, port: int, *, database: str, secret: str) -> Simulator:
    """Open (or create, or upgrade) the ledger at `database`, resume what was still PROCESSING,
    and listen on host:port (0: any free port)."""
    ledger = Ledger(database)
    background = Background()
    bank = Bank(ledger, Notifier(secret, background), background)
    bank.resume_pending()
    server = await serve(Routes(bank), host, port)
    return Simulator(server, bank)


def run(host: str = "127.0.0.1", port: int = 8765, env: Mapping[str, str] | None = None) -> None:
    env = os.environ if env is None else env
    database = env.get("SIMBANK_DATABASE") or DEFAULT_DATABASE
    secret = env.get("SIMBANK_SECRET") or DEFAULT_SECRET
    asyncio.run(_serve_until_stopped(host, port, database, secret))


async def _serve_until_stopped(host: str, port: int, database: str, secret: str) -> None:
    simulator = await start(host, port, database=database, secret=secret)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("simbank.listening", url=f"http://{host}:{simulator.port}", database=database)
    try:
        await stop.wait()
    finally:
        await simulator.aclose()
        log.info("simbank.stopped")
