"""What the scenarios of one invocation share: the profile, a scratch folder, the baselines
measured so far (the SQL floor by concurrency), and the databases and channels they set up."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console

from bench import pg, procs
from bench.figures import Baseline
from bench.profile import Profile


@dataclass
class Context:
    profile: Profile
    workdir: Path
    console: Console
    sql_dir: Path  # where the captured pgbench scripts are written (bench/sql on a real run)
    floor: dict[int, Baseline] = field(default_factory=dict)  # pgbench tx/s by concurrency
    floor_latency: dict[int, dict[str, Baseline]] = field(default_factory=dict)

    def say(self, message: str) -> None:
        self.console.log(message)

    def folder(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@contextmanager
def database(kind: str, ctx: Context, label: str) -> Iterator[tuple[str, str | None]]:
    """A fresh database: (IDEMPAY_DATABASE_URL, PostgreSQL name or None for SQLite)."""
    if kind == "sqlite":
        yield f"sqlite:///{ctx.folder(label) / 'idempay.db'}", None
        return
    with pg.fresh_db(label) as name:
        yield pg.url(name), name


@dataclass
class ChannelSetup:
    """The channel a server is given, and how to count the channel's executions from outside."""

    kind: str
    channels: dict[str, object]
    count: Callable[[], int]
    simbank: procs.Proc | None = None


def _jsonl_lines(path: Path) -> int:
    with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
        return sum(1 for _ in f)
    return 0


def _ledger_size(sim: procs.Proc) -> int:
    return len(httpx.get(sim.url + "/_sim/ledger", timeout=60).json())


@contextmanager
def channel(kind: str, ctx: Context, label: str) -> Iterator[ChannelSetup]:
    """`scripted`: the in-process instant channel, counted by its JSONL ledger; `simbank`: the
    simulator as a subprocess with no faults (0 latency), counted by GET /_sim/ledger."""
    if kind == "scripted":
        ledger = ctx.folder(label) / "scripted-ledger.jsonl"
        yield ChannelSetup(kind, procs.scripted_channels(ledger), lambda: _jsonl_lines(ledger))
        return
    sim = procs.start_simbank(ctx.folder(label))
    try:
        httpx.put(sim.url + "/_sim/faults", json={}, timeout=10).raise_for_status()
        yield ChannelSetup(kind, procs.simbank_channels(sim), lambda: _ledger_size(sim), sim)
    finally:
        sim.stop()
