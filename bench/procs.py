"""The processes a benchmark drives: `idempay serve` and `idempay simbank` subprocesses on free
local ports, with their CPU time and peak memory read from /proc."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent  # where `python -m bench.*` works
START_TIMEOUT_S = 30.0
SIMBANK_SECRET = "bench-simbank-secret"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def postgres_cpu() -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL process on the machine, by pid (backends of other
    clients too: the machine's server is shared)."""
    out: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                out[int(entry.name)] = cpu_seconds(int(entry.name))
        except OSError:
            continue
    return out


def postgres_cpu_delta(before: dict[int, float]) -> float:
    """CPU seconds PostgreSQL processes used since `before` (a process gone since is not counted,
    one started since counts whole)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in postgres_cpu().items())


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores; /proc/stat, idle and iowait out)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLOCK_TICKS


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the peak resident set size of a process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Proc:
    """A child process listening on `port`; stopped by SIGTERM (then SIGKILL)."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def _wait(proc: Proc, path: str) -> Proc:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.process.poll() is None:
        try:
            httpx.get(proc.url + path, timeout=1.0).raise_for_status()
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"{proc.name} did not start on port {proc.port}:\n{proc.tail()}")


def _idempay(*args: str) -> list[str]:
    return [sys.executable, "-m", "idempay.cli", *args]


def start_simbank(workdir: Path) -> Proc:
    port = free_port()
    log = workdir / f"simbank-{port}.log"
    env = {
        **os.environ,
        "SIMBANK_DATABASE": str(workdir / f"simbank-{port}.db"),
        "SIMBANK_SECRET": SIMBANK_SECRET,
        "IDEMPAY_LOG_FORMAT": "json",
    }
    with log.open("ab") as out:
        process = subprocess.Popen(
            _idempay("simbank", "--port", str(port)), env=env, stdout=out, stderr=out, cwd=workdir
        )
    return _wait(Proc("simbank", process, port, log), "/_sim/health")


def scripted_channels(ledger: Path) -> dict[str, Any]:
    """The in-process instant channel, under the default channel's name, with a JSONL ledger."""
    return {"simbank": {"kind": "scripted", "ledger_path": str(ledger)}}


def simbank_channels(simbank: Proc) -> dict[str, Any]:
    return {"simbank": {"kind": "simbank", "base_url": simbank.url, "secret": SIMBANK_SECRET}}


@dataclass
class Server:
    """One `idempay serve` on one database, with one merchant and its key."""

    proc: Proc
    database_url: str
    api_key: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.proc.url

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=10).text

    def stop(self) -> None:
        self.proc.stop()


def idempay_env(database_url: str, channels: dict[str, Any], **extra: str) -> dict[str, str]:
    """A hermetic environment: no IDEMPAY_* variable of the caller leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDEMPAY_", "SIMBANK_"))}
    env.update(
        IDEMPAY_DATABASE_URL=database_url,
        IDEMPAY_CHANNELS=json.dumps(channels),
        IDEMPAY_LOG_FORMAT="json",
        **extra,
    )
    return env


def create_merchant(env: dict[str, str], workdir: Path) -> str:
    """`idempay merchant create` (which also creates the schema); the merchant's API key."""
    done = subprocess.run(
        _idempay("merchant", "create", "bench"),
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"merchant create failed:\n{done.stderr[-3000:]}")
    return str(json.loads(done.stdout)["api_key"])


def start_server(
    workdir: Path, database_url: str, channels: dict[str, Any], **extra_env: str
) -> Server:
    env = idempay_env(database_url, channels, **extra_env)
    api_key = create_merchant(env, workdir)
    port = free_port()
    log = workdir / f"serve-{port}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            _idempay("serve", "--port", str(port)), env=env, stdout=out, stderr=out, cwd=workdir
        )
    proc = _wait(Proc("idempay serve", process, port, log), "/healthz")
    return Server(proc, database_url, api_key, env)
