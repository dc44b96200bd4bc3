"""Scenario 7, the worker: how fast `idempay worker` resolves N (10,000) UNKNOWN instructions
against the simulator, next to the simulator's raw query rate measured in the same round.

The simulator (`idempay simbank`, no faults, 0 latency) executes every payment once at setup.
Per round: the baseline, N queries straight to the simulator with as many in flight as the
worker's batch (`ResolutionPolicy.batch`, 50); the same queries (a sample) through idempay's own
`SimbankChannel`, the adapter the worker queries with; then each case (1 worker process; more
with `Profile.worker_processes`) on a fresh database: bench/resolve.py. Queries never execute,
so the simulator's ledger must still hold each payment exactly once at the end."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import procs, unknowns
from bench.context import Context
from bench.figures import Baseline, Figure, Section
from bench.procs import REPO
from bench.resolve import WORKER_POLL_MS, Resolution, resolve
from idempay.services.resolution import ResolutionPolicy

CONCURRENCY = ResolutionPolicy().batch  # the worker queries a claimed batch all at once
SETUP_CONCURRENCY = 32
ADAPTER_SAMPLE = 1_000  # at most, through SimbankChannel per round (slow at 50 in flight)
WARM_N, WARM_NEVER = 200, 20  # the warm-up round; a few never executed (the close path)
TARGET = 0.80


@dataclass
class Direct:
    """Direct calls to the simulator, per round: rate, seconds, CPU of both ends (cores)."""

    rates: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    client: list[float] = field(default_factory=list)
    client_us: list[float] = field(default_factory=list)  # client CPU per call
    sim: list[float] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)

    def measure(self, sim: procs.Proc, rows: Path, op: str, limit: int | None = None) -> None:
        s0 = procs.cpu_seconds(sim.pid)
        out = call(sim, rows, op, CONCURRENCY, limit)
        seconds = out["seconds"]
        self.seconds.append(seconds)
        self.rates.append(out["statuses"].get("SUCCESS", 0) / seconds)
        self.client.append(out["cpu_s"] / seconds)
        self.client_us.append(out["cpu_s"] / max(1, out["calls"]) * 1e6)
        self.sim.append((procs.cpu_seconds(sim.pid) - s0) / seconds)
        self.answers.update(out["statuses"])

    def note(self) -> str:
        med = statistics.median
        return (
            f"querying process {med(self.client):.2f} cores, {med(self.client_us):,.0f} us "
            f"CPU/query; simulator {med(self.sim):.2f} cores; answers {dict(self.answers)}"
        )


def run(ctx: Context) -> Section:
    p = ctx.profile
    n = p.worker_instructions
    section = Section("worker", f"Worker: resolving {n:,} UNKNOWN instructions (simulator)")
    folder = ctx.folder("worker")
    rows, warm = unknowns.make(n), unknowns.make(min(n, WARM_N), never_executed=WARM_NEVER)
    rows_file = unknowns.save(rows, folder / "rows.json")
    raw, adapter = Direct(), Direct()
    cases: dict[int, list[Resolution]] = {k: [] for k in p.worker_processes}
    bound_s = 60 + n / 20  # per run; the worker resolves well over 20/s
    sim = procs.start_simbank(folder)
    try:
        httpx.put(sim.url + "/_sim/faults", json={}, timeout=10).raise_for_status()
        executed = sum(u.executed for u in rows + warm)
        ctx.say(f"worker: the simulator executes {executed:,} payments")
        setup = call(sim, unknowns.save(rows + warm, folder / "all.json"), "execute")
        section.check(
            f"setup: every execution answered SUCCESS ({setup['statuses']})",
            setup["statuses"] == {"SUCCESS": executed},
        )
        call(sim, rows_file, "query", CONCURRENCY)  # warm-ups, not reported
        w = resolve(ctx.folder("worker/warm"), sim, warm, 1, bound_s)
        section.check(
            f"warm-up: {WARM_N} executed -> SUCCESS, {WARM_NEVER} never executed -> closed, "
            f"FAILED ({w.outcome.instructions})",
            not w.outcome.wrong,
        )
        for r in range(p.runs):
            raw.measure(sim, rows_file, "query")
            adapter.measure(sim, rows_file, "adapter", min(n, ADAPTER_SAMPLE))
            for k, runs in cases.items():
                runs.append(resolve(ctx.folder(f"worker/r{r}k{k}"), sim, rows, k, bound_s))
                ctx.say(
                    f"worker run {r + 1}: simulator {raw.rates[-1]:,.0f} queries/s, "
                    f"SimbankChannel {adapter.rates[-1]:,.0f}/s; {k} worker(s) "
                    f"{runs[-1].rate:,.0f} instructions/s"
                )
        _check_ledger(section, sim, rows + warm)
    finally:
        sim.stop()
    _figures(section, n, raw, adapter, cases)
    return section


def _figures(
    section: Section, n: int, raw: Direct, adapter: Direct, cases: dict[int, list[Resolution]]
) -> None:
    base = Baseline(f"simulator raw query rate, c={CONCURRENCY}", raw.rates)
    med = statistics.median
    for k, runs in cases.items():
        label = f"{k} worker process{'es' if k > 1 else ''}"
        section.add(
            Figure(
                "worker",
                label,
                "rate",
                "instructions/s",
                [r.rate for r in runs],
                base,
                target=f">= {TARGET:.2f} of the simulator" if k == 1 else "",
                note=(
                    f"worker{'s' if k > 1 else ''} {med(r.cores(r.worker_cpu_s) for r in runs):.2f}"
                    f" cores, {med(r.worker_cpu_s for r in runs) / n * 1e6:,.0f} us CPU/instruction"
                    f"; pg {med(r.cores(r.pg_cpu_s) for r in runs):.2f}; simbank "
                    f"{med(r.cores(r.sim_cpu_s) for r in runs):.2f}; other processes "
                    f"{med(r.others for r in runs):.2f} cores"
                ),
            )
        )
        section.add(
            Figure(
                "worker",
                label,
                "duration",
                "s",
                [r.seconds for r in runs],
                Baseline("the same queries straight to the simulator", raw.seconds),
            )
        )
        wrong = [len(r.outcome.wrong) for r in runs]
        section.check(
            f"{label}: every instruction and payment SUCCESS in every run (others: {wrong})",
            not any(wrong),
        )
    section.add(
        Figure(
            "worker",
            f"SimbankChannel alone, c={CONCURRENCY}",
            "rate",
            "queries/s",
            adapter.rates,
            base,
            note=f"{min(n, ADAPTER_SAMPLE):,} queries per run; {adapter.note()}",
        )
    )
    section.check(
        f"baseline: every query answered SUCCESS ({dict(raw.answers)})",
        set(raw.answers) == {"SUCCESS"},
    )
    section.notes += [
        f"baseline: {n:,} GET /bank/pay/{{request_id}}, {CONCURRENCY} in flight on keep-alive "
        f"connections (a lean asyncio client, bench/worker_run.py); {raw.note()}.",
        f"each worker run: a fresh database; the worker process(es) started and idle "
        f"(IDEMPAY_WORKER_POLL_MS={WORKER_POLL_MS}); {n:,} payments + instructions, UNKNOWN and "
        "due, written by one COPY; timed from its commit to the last payment's update. A worker "
        f"claims {CONCURRENCY} (ResolutionPolicy.batch), queries them at once, records the "
        "answers in one transaction (one instruction per payment per transaction, each through "
        "apply_outcome), then marks the webhooks due SKIPPED (no notify_url) in one statement "
        "before it claims again.",
    ]


def call(
    sim: procs.Proc,
    rows: Path,
    op: str,
    concurrency: int = SETUP_CONCURRENCY,
    limit: int | None = None,
) -> dict[str, Any]:
    """bench/worker_run.py in its own process: `execute`, `query` or `adapter`."""
    spec = {"op": op, "sim_url": sim.url, "rows": str(rows), "concurrency": concurrency}
    done = subprocess.run(
        [sys.executable, "-m", "bench.worker_run", json.dumps({**spec, "limit": limit})],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker_run {op} failed:\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _check_ledger(section: Section, sim: procs.Proc, rows: list[unknowns.Unknown]) -> None:
    """Queries never execute: each executed row ran exactly once, the others never."""
    ledger = httpx.get(sim.url + "/_sim/ledger", timeout=120).json()
    counts = Counter(str(e["request_id"]) for e in ledger)
    expected = {u.request_id for u in rows if u.executed}
    twice = sum(1 for c in counts.values() if c > 1)
    section.check(
        f"simulator ledger: {len(ledger):,} executions for {len(expected):,} executed payments, "
        f"{twice} executed twice, {len(set(counts) - expected)} never-executed ones executed",
        set(counts) == expected and twice == 0,
    )
