"""The demo's real subprocesses: simulators, `idempay serve`, `idempay worker`, on free loopback
ports, all killed on the way out (also on Ctrl-C)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from idempay.demo.workload import Run

SIM_SECRET = "simbank-demo-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Procs:
    """Starts and tracks processes; `stop_all()` ends every one of them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.folder / f"{name}.log").open("ab")
        p = subprocess.Popen(
            [sys.executable, "-m", "idempay.cli", *args],
            env={**os.environ, **env},
            stdout=log,
            stderr=log,
            cwd=self.folder,
            start_new_session=True,
        )
        log.close()
        self.running.append(p)
        return p

    def kill(self, p: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def stop_all(self) -> None:
        for p in reversed(self.running):
            self.kill(p, signal.SIGTERM)
        self.running.clear()


def wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


class Simbank:
    def __init__(self, procs: Procs, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            "SIMBANK_DATABASE": str(procs.folder / f"{name}.db"),
            "SIMBANK_SECRET": SIM_SECRET,
            "IDEMPAY_LOG_FORMAT": "json",
        }
        self.process = procs.start(name, ["simbank", "--port", str(self.port)], env)
        wait_http(f"{self.url}/_sim/health")

    def faults(self, **knobs: Any) -> None:
        httpx.put(f"{self.url}/_sim/faults", json=knobs, timeout=10).raise_for_status()

    def ledger(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/_sim/ledger", timeout=30)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]


class Idempay:
    """`idempay serve` + `idempay worker` on one database (default: a SQLite file in the
    folder), against one simulator; `env` adds or overrides settings."""

    def __init__(
        self, procs: Procs, sim: Simbank, database_url: str | None = None, **env: str
    ) -> None:
        self.procs = procs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url or f"sqlite:///{procs.folder / 'idempay.db'}"
        channels = {"simbank": {"kind": "simbank", "base_url": sim.url, "secret": SIM_SECRET}}
        self.env = {
            "IDEMPAY_DATABASE_URL": self.database_url,
            "IDEMPAY_CHANNELS": json.dumps(channels),
            "IDEMPAY_PUBLIC_URL": self.url,
            "IDEMPAY_CHANNEL_TIMEOUT_MS": "1000",
            "IDEMPAY_STALE_PENDING_MS": "3000",
            "IDEMPAY_NOT_FOUND_GRACE_MS": "3000",
            "IDEMPAY_RESOLVE_BACKOFF_S": "0.5,1,2",
            "IDEMPAY_WORKER_POLL_MS": "200",
            "IDEMPAY_WORKER_LEASE_MS": "10000",
            "IDEMPAY_LOG_FORMAT": "json",
            **env,
        }
        created = subprocess.run(
            [sys.executable, "-m", "idempay.cli", "merchant", "create", "demo"],
            env={**os.environ, **self.env},
            capture_output=True,
            check=True,
            cwd=procs.folder,
        )
        self.api_key = json.loads(created.stdout)["api_key"]
        self.serve: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None

    def start_serve(self) -> None:
        self.serve = self.procs.start("serve", ["serve", "--port", str(self.port)], self.env)
        wait_http(f"{self.url}/healthz")

    def kill_serve(self) -> None:
        assert self.serve is not None
        self.procs.kill(self.serve, signal.SIGKILL)

    def start_worker(self, name: str = "worker") -> subprocess.Popen[bytes]:
        self.worker = self.procs.start(name, ["worker"], self.env)
        return self.worker

    def _client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)

    async def kill_serve_midway(self, run: Run, total: int) -> None:
        """SIGKILL `serve` once half the payments are done, then start it again."""
        while run.done < total // 2:  # noqa: ASYNC110 - progress is a counter, polled
            await asyncio.sleep(0.05)
        self.kill_serve()  # whatever was between the bank and the database is cut off
        await asyncio.sleep(0.3)
        await asyncio.to_thread(self.start_serve)

    async def open_payments(self) -> int:
        async with self._client() as client:
            found = 0
            for status in ("UNKNOWN", "PROCESSING"):
                r = await client.get("/v1/payments", params={"status": status, "limit": 1})
                found += len(r.json()["items"])
            return found

    async def wait_settled(self, timeout_s: float) -> bool:
        """Until no payment is UNKNOWN or PROCESSING (True), or `timeout_s` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not await self.open_payments():
                return True
            await asyncio.sleep(0.25)
        return False

    async def payments(self) -> list[dict[str, Any]]:
        """Every payment of the demo merchant, through the API's list."""
        out: list[dict[str, Any]] = []
        cursor = None
        async with self._client() as client:
            while True:
                params: dict[str, Any] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
                page = (await client.get("/v1/payments", params=params)).json()
                out.extend(page["items"])
                cursor = page["next_cursor"]
                if not cursor:
                    return out
