"""`idempay simbank` as a real subprocess for tests: a free port, its own SQLite file in a given
directory, started, waited for until it answers, stopped at the end. `running_simbank()` is the
context manager; tests/channels/conftest.py turns it into the `simbank` fixtures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

SECRET = "simbank-test-secret"
START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SimbankProcess:
    """A running simulator and its control endpoints (/_sim/*), called synchronously."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, secret: str, log: Path) -> None:
        self.process, self.port, self.secret, self.log = process, port, secret, log
        self.url = f"http://127.0.0.1:{port}"

    def faults(self, **knobs: Any) -> dict[str, Any]:
        """PUT /_sim/faults: replaces the whole set (knobs not given return to their default)."""
        return self._call("PUT", "/_sim/faults", json=knobs)  # type: ignore[no-any-return]

    def ledger(self, payment_ref: str | None = None) -> list[dict[str, Any]]:
        params = {} if payment_ref is None else {"payment_ref": payment_ref}
        return self._call("GET", "/_sim/ledger", params=params)  # type: ignore[no-any-return]

    def executions(self, request_id: str) -> list[dict[str, Any]]:
        return [e for e in self.ledger() if e["request_id"] == request_id]

    def reset(self) -> None:
        """Empty the ledger and the closed request_ids, cancel pending work, default faults."""
        self._call("POST", "/_sim/reset")

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        response = httpx.request(method, self.url + path, timeout=10, **kw)
        response.raise_for_status()
        return response.json()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not go within 5 s; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return int(self.process.returncode)


def _start(directory: Path, port: int, secret: str, command: list[str] | None) -> SimbankProcess:
    log = directory / f"simbank-{port}.log"
    env = {
        **os.environ,
        "SIMBANK_DATABASE": str(directory / "simbank.db"),
        "SIMBANK_SECRET": secret,
        "IDEMPAY_LOG_FORMAT": "json",
    }
    argv = [*(command or [sys.executable, "-m", "idempay.cli"]), "simbank", "--port", str(port)]
    with log.open("ab") as err:
        process = subprocess.Popen(argv, env=env, stdout=err, stderr=err, cwd=directory)
    sim = SimbankProcess(process, port, secret, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(f"{sim.url}/_sim/health", timeout=0.5).raise_for_status()
            return sim
        except httpx.HTTPError:
            time.sleep(0.05)
    sim.stop()
    raise RuntimeError(f"simbank did not start on port {port}:\n{log.read_text()[-3000:]}")


@contextmanager
def running_simbank(
    directory: Path,
    *,
    secret: str = SECRET,
    port: int | None = None,
    command: list[str] | None = None,
) -> Iterator[SimbankProcess]:
    """A simulator with its database in `directory`; `command` replaces
    `python -m idempay.cli` (e.g. the installed `idempay` script)."""
    directory.mkdir(parents=True, exist_ok=True)
    attempts = 1 if port is not None else 3  # a free port may be taken before the child binds it
    for attempt in range(attempts):
        try:
            sim = _start(directory, port or free_port(), secret, command)
            break
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    try:
        yield sim
    finally:
        sim.stop()
