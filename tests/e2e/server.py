"""`idempay serve` as a real subprocess for end-to-end tests, with in-process scripted channels
whose executions are appended to a JSONL ledger the tests read from outside the process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import func, select

from idempay import bootstrap
from idempay.config import Settings
from idempay.storage import tables as t

T = TypeVar("T")

# Channel name -> scripted settings (bootstrap.build_channel). "simbank" is a scripted stand-in
# under the default channel's name, so the curl session of docs/api.md runs as printed.
CHANNELS: dict[str, dict[str, Any]] = {
    "fast": {"kind": "scripted"},
    "simbank": {"kind": "scripted"},
    "slow": {"kind": "scripted", "delay_ms": 1200},
    "halfopen": {"kind": "scripted", "default": "HALF_OPEN"},
    "decline": {"kind": "scripted", "default": "DECLINE"},
    "pending": {"kind": "scripted", "default": "PENDING"},
    "flaky": {"kind": "scripted", "plan": ["DECLINE"]},  # declines once, then succeeds
    # The first operation (one test's charge) succeeds, every later one (its refund or split
    # items) answers as named: one test each per server, like "flaky".
    "refund_lost": {"kind": "scripted", "plan": ["SUCCEED"], "default": "HALF_OPEN"},
    "refund_pending": {"kind": "scripted", "plan": ["SUCCEED"], "default": "PENDING"},
    "refund_declined": {"kind": "scripted", "plan": ["SUCCEED"], "default": "DECLINE"},
    "split_lost": {"kind": "scripted", "plan": ["SUCCEED"], "default": "HALF_OPEN"},
    "split_declined": {"kind": "scripted", "plan": ["SUCCEED"], "default": "DECLINE"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cli(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IDEMPAY_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "idempay.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Server:
    """One `idempay serve` process on a fresh database."""

    database_url: str
    workdir: Path
    channels: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(CHANNELS))
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _db: Db | None = None

    @property
    def db(self) -> Db:
        if self._db is None:
            self._db = Db(self.database_url)
        return self._db

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ledger(self) -> Path:
        return self.workdir / "ledger.jsonl"

    @property
    def log(self) -> Path:
        return self.workdir / "serve.log"

    def start(self, timeout_s: float = 30.0) -> Server:
        self.port = free_port()
        channels = {n: {**c, "ledger_path": str(self.ledger)} for n, c in self.channels.items()}
        env = {
            **os.environ,
            "IDEMPAY_DATABASE_URL": self.database_url,
            "IDEMPAY_CHANNELS": json.dumps(channels),
            "IDEMPAY_LOG_FORMAT": "json",
            **self.env,
        }
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "idempay.cli", "serve", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"idempay serve exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"idempay serve did not become healthy:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def executions(self, payment_ref: str | None = None) -> list[dict[str, Any]]:
        """Every execution the server's channels performed (the ground truth), oldest first."""
        if not self.ledger.exists():
            return []
        rows = [json.loads(line) for line in self.ledger.read_text().splitlines() if line]
        return [r for r in rows if payment_ref is None or r["payment_ref"] == payment_ref]


@dataclass(frozen=True)
class Principal:
    id: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def create_principal(database_url: str, name: str, *, operator: bool = False) -> Principal:
    """A new merchant (or operator) in the server's database, with its API key."""
    c = await bootstrap.build(
        Settings(database_url=database_url), channels={}, run_migrations=False, null_pool=True
    )
    try:
        return Principal(*await bootstrap.create_principal(c.store, name, operator=operator))
    finally:
        await c.aclose()


class Db:
    """The server's database seen from the tests: one container on its own event-loop thread, so
    the tests (each on its own loop) share one connection pool instead of connecting each time."""

    def __init__(self, database_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        settings = Settings(database_url=database_url)
        build = bootstrap.build(settings, channels={}, run_migrations=False, pool_size=2)
        self.container = self._submit(build).result()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self._submit(coro))

    async def principal(self, name: str, *, operator: bool = False) -> Principal:
        store = self.container.store
        return Principal(
            *await self.call(bootstrap.create_principal(store, name, operator=operator))
        )

    async def counts(self, merchant_id: str, *tables: t.Table) -> tuple[int, ...]:
        """Rows per table for `merchant_id`, in one round trip."""
        q = select(
            *(
                select(func.count())
                .select_from(tb)
                .where(tb.c.merchant_id == merchant_id)
                .scalar_subquery()
                for tb in tables
            )
        )

        async def run() -> tuple[int, ...]:
            async with self.container.engine.connect() as conn:
                return tuple(int(n) for n in (await conn.execute(q)).one())

        return await self.call(run())

    async def balances(self, merchant_id: str) -> list[tuple[str, int, int, int]]:
        """(biz_no, refunded, split, reserved) of each of `merchant_id`'s payments, by biz_no."""
        p = t.payments.c
        q = (
            select(p.biz_no, p.refunded_amount, p.split_amount, p.reserved_amount)
            .where(p.merchant_id == merchant_id)
            .order_by(p.biz_no)
        )

        async def run() -> list[tuple[str, int, int, int]]:
            async with self.container.engine.connect() as conn:
                return [(str(b), int(r), int(s), int(v)) for b, r, s, v in await conn.execute(q)]

        return await self.call(run())

    def close(self) -> None:
        self._submit(self.container.aclose()).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
