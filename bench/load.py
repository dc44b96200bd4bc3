"""Running the load generator: one or more `bench.loadgen` processes started together, their
results merged, with the CPU the server, PostgreSQL and the generators used meanwhile."""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.figures import percentile
from bench.procs import REPO, cpu_seconds, machine_busy_seconds, postgres_cpu, postgres_cpu_delta

START_DELAY_S = 0.3  # time for every (already running) generator process to get its spec
GEN_BOUND = 0.85  # a generator process busier than this (of one core) limits the measurement


@dataclass
class LoadResult:
    count: int
    ok: int
    errors: int
    first_error: str
    statuses: dict[str, int]
    replayed: int
    elapsed_s: float
    latencies_ms: list[float]
    dup_latencies_ms: list[float]
    gen_cpu: float  # busiest generator process, in cores
    server_cpu: float  # cores
    server_cpu_s: float
    pg_cpu: float  # cores (every PostgreSQL process on the machine)
    processes: int
    gen_cpu_total: float  # all generator processes, in cores
    keys: int  # storm: biz_nos sent
    machine_cpu: float  # the whole machine busy, in cores

    @property
    def others_cpu(self) -> float:
        """Cores busy with processes that are not part of this measurement (noise)."""
        return max(0.0, self.machine_cpu - self.server_cpu - self.pg_cpu - self.gen_cpu_total)

    @property
    def rate(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def p(self, q: float, *, duplicates: bool = False) -> float:
        return percentile(self.dup_latencies_ms if duplicates else self.latencies_ms, q)

    @property
    def server_us_per_request(self) -> float:
        return self.server_cpu_s / self.count * 1e6 if self.count else float("nan")

    @property
    def generator_bound(self) -> bool:
        return self.gen_cpu >= GEN_BOUND


def processes_for(concurrency: int) -> int:
    """One generator process up to 8 clients, two beyond (the machine has 2 cores)."""
    return 1 if concurrency <= 8 else 2


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class _Pool:
    """Long-lived generator processes (`python -m bench.loadgen` reading specs on stdin)."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[str]] = []

    def get(self, n: int) -> list[subprocess.Popen[str]]:
        self.children = [c for c in self.children if c.poll() is None]
        while len(self.children) < n:
            argv = [sys.executable, "-m", "bench.loadgen"]
            self.children.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=REPO,
                    bufsize=1,
                )
            )
        return self.children[:n]

    def close(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        self.children = []


POOL = _Pool()
atexit.register(POOL.close)


def run_load(
    spec: dict[str, Any],
    *,
    server_pid: int | None = None,
    processes: int | None = None,
    records_dir: Path | None = None,
) -> LoadResult:
    """Run `spec` (see bench.loadgen) in `processes` generator processes (default by
    concurrency); `records_dir` collects a `first` run's requests as `<tag>-p<i>.jsonl`."""
    concurrency = int(spec.get("concurrency", 1))
    n = processes or processes_for(concurrency)
    children = POOL.get(n)
    start_at = time.time() + START_DELAY_S
    for i, (child, share) in enumerate(zip(children, _split(concurrency, n), strict=True)):
        mine = {**spec, "concurrency": share, "tag": f"{spec['tag']}p{i}", "start_at": start_at}
        if records_dir is not None and spec["mode"] == "first":
            mine["record"] = str(records_dir / f"{spec['tag']}-p{i}.jsonl")
        assert child.stdin is not None
        child.stdin.write(json.dumps(mine) + "\n")
        child.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))
    s0 = cpu_seconds(server_pid) if server_pid else 0.0
    pg0, m0, t0 = postgres_cpu(), machine_busy_seconds(), time.time()
    outs = []
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            POOL.close()
            raise RuntimeError("a load generator process died (its stderr is the bench's)")
        outs.append(json.loads(line))
    wall = time.time() - t0
    s1, pg_s = cpu_seconds(server_pid) if server_pid else 0.0, postgres_cpu_delta(pg0)
    return _merge(outs, wall, s1 - s0, pg_s, machine_busy_seconds() - m0)


def _merge(
    outs: list[dict[str, Any]], wall: float, server_s: float, pg_s: float, busy_s: float
) -> LoadResult:
    statuses: dict[str, int] = {}
    for o in outs:
        for k, v in o["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    elapsed = max(o["elapsed_s"] for o in outs)
    return LoadResult(
        count=sum(o["count"] for o in outs),
        ok=sum(o["ok"] for o in outs),
        errors=sum(o["errors"] for o in outs),
        first_error=next((o["first_error"] for o in outs if o["first_error"]), ""),
        statuses=statuses,
        replayed=sum(o["replayed"] for o in outs),
        elapsed_s=elapsed,
        latencies_ms=sorted(x for o in outs for x in o["latencies_ms"]),
        dup_latencies_ms=sorted(x for o in outs for x in o["dup_latencies_ms"]),
        gen_cpu=max(o["cpu_s"] / o["elapsed_s"] if o["elapsed_s"] else 0.0 for o in outs),
        server_cpu=server_s / wall if wall else 0.0,
        server_cpu_s=server_s,
        pg_cpu=pg_s / wall if wall else 0.0,
        processes=len(outs),
        keys=sum(o.get("keys", 0) for o in outs),
        gen_cpu_total=sum(o["cpu_s"] for o in outs) / wall if wall else 0.0,
        machine_cpu=busy_s / wall if wall else 0.0,
    )


def concat_records(records_dir: Path, out: Path) -> int:
    """Every recorded request of the `first` runs in `records_dir`, in one file; how many."""
    lines: list[str] = []
    for part in sorted(records_dir.glob("*.jsonl")):
        lines += [line for line in part.read_text().splitlines() if line.strip()]
    out.write_text("\n".join(lines) + "\n")
    return len(lines)
