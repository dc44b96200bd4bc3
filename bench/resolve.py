"""One measured resolution for the worker scenario: a fresh PostgreSQL database and merchant,
`k` real `idempay worker` processes started and idle, the UNKNOWN rows written at once, then
polled until none is live; with the CPU the workers, PostgreSQL and the simulator used."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench import loader, pg, procs, unknowns

POLL_S = 0.2  # how often the database is asked whether the workers are done
WORKER_POLL_MS = "100"  # an idle worker looks for due work this often (default 1000)
FIRST_CHORES_S = 0.3  # after "worker.started": rates, purge, daily reconciliation run first


@dataclass
class Resolution:
    seconds: float  # from the rows' commit to the last resolution's commit
    resolved: int  # instructions no longer live (SUCCESS or FAILED)
    outcome: unknowns.Outcome
    worker_cpu_s: float  # all worker processes
    pg_cpu_s: float
    sim_cpu_s: float
    machine_s: float  # the whole machine's busy CPU seconds
    wall_s: float  # the CPU window: from before the rows' COPY to the last poll

    @property
    def rate(self) -> float:
        return self.resolved / self.seconds if self.seconds > 0 else 0.0

    def cores(self, cpu_s: float) -> float:
        return cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def others(self) -> float:
        """Cores busy with processes outside the measurement (noise)."""
        return max(
            0.0, self.cores(self.machine_s - self.worker_cpu_s - self.pg_cpu_s - self.sim_cpu_s)
        )


def resolve(
    folder: Path, sim: procs.Proc, rows: list[unknowns.Unknown], k: int, bound_s: float
) -> Resolution:
    """A fresh database, `k` idle workers, the rows written in one COPY; until none is live (or
    `bound_s` passed: the outcome then shows what is left)."""
    with pg.fresh_db("worker") as db:
        env = procs.idempay_env(
            pg.url(db), procs.simbank_channels(sim), IDEMPAY_WORKER_POLL_MS=WORKER_POLL_MS
        )
        procs.create_merchant(env, folder)  # migrates the new database too
        merchant = loader.merchant_of(db)
        workers = [_start(folder, env, i) for i in range(k)]
        try:
            _wait_started(folder, workers)
            w0 = [procs.cpu_seconds(w.pid) for w in workers]
            s0, pg0 = procs.cpu_seconds(sim.pid), procs.postgres_cpu()
            m0, t_wall = procs.machine_busy_seconds(), time.monotonic()
            t0 = unknowns.insert(db, merchant, rows)
            with psycopg.connect(pg.dsn(db), autocommit=True) as conn:
                while unknowns.terminal(conn) < len(rows) and time.monotonic() - t_wall < bound_s:
                    time.sleep(POLL_S)
            wall = time.monotonic() - t_wall
            worker_cpu = sum(procs.cpu_seconds(w.pid) - c for w, c in zip(workers, w0, strict=True))
            sim_cpu, pg_cpu = procs.cpu_seconds(sim.pid) - s0, procs.postgres_cpu_delta(pg0)
            machine = procs.machine_busy_seconds() - m0
        finally:
            _stop(workers)
        out = unknowns.outcome(db, rows)
    resolved = sum(v for s, v in out.instructions.items() if s in ("SUCCESS", "FAILED"))
    seconds = (out.last_change - t0).total_seconds() if out.last_change else float("nan")
    return Resolution(seconds, resolved, out, worker_cpu, pg_cpu, sim_cpu, machine, wall)


def _start(folder: Path, env: dict[str, str], i: int) -> subprocess.Popen[bytes]:
    log = folder / f"worker-{i}.log"
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "idempay.cli", "worker"],
            env=env,
            stdout=out,
            stderr=out,
            cwd=folder,
        )


def _wait_started(folder: Path, workers: list[subprocess.Popen[bytes]]) -> None:
    logs = [folder / f"worker-{i}.log" for i in range(len(workers))]
    deadline = time.monotonic() + procs.START_TIMEOUT_S
    while time.monotonic() < deadline and all(w.poll() is None for w in workers):
        if all(b"worker.started" in log.read_bytes() for log in logs):
            time.sleep(FIRST_CHORES_S)
            return
        time.sleep(0.05)
    tails = "\n".join(log.read_text(errors="replace")[-1500:] for log in logs)
    _stop(workers)
    raise RuntimeError(f"idempay worker did not start:\n{tails}")


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (the worker finishes its round and exits), then SIGKILL after 15 s."""
    for w in workers:
        if w.poll() is None:
            w.terminate()
    for w in workers:
        try:
            w.wait(15)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait(5)
