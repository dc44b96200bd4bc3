"""PostgreSQL for the benchmarks: throw-away databases, statistics counters, and pgbench."""

from __future__ import annotations

import glob
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.figures import percentile

HOST, PORT, USER = "127.0.0.1", 5432, "postgres"
ADMIN_DB = os.environ.get("BENCH_PG_ADMIN_DB", "test")
PREFIX = "idempay_bench_"
CONNECT_TRIES = 5


def dsn(db: str) -> str:
    return f"host={HOST} port={PORT} user={USER} dbname={db}"


def url(db: str) -> str:
    """The IDEMPAY_DATABASE_URL of database `db`."""
    return f"postgresql://{USER}@{HOST}:{PORT}/{db}"


def execute(db: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn(db), autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def create_db(label: str) -> str:
    name = f"{PREFIX}{label}_{secrets.token_hex(3)}"
    execute(ADMIN_DB, f"CREATE DATABASE {name}")
    return name


def drop_db(name: str) -> None:
    if name.startswith(PREFIX):
        execute(ADMIN_DB, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def fresh_db(label: str) -> Iterator[str]:
    name = create_db(label)
    try:
        yield name
    finally:
        drop_db(name)


def server_version() -> str:
    return str(execute(ADMIN_DB, "SHOW server_version")[0][0])


def settings() -> dict[str, str]:
    names = ["synchronous_commit", "fsync", "shared_buffers", "max_connections", "wal_level"]
    rows = execute(ADMIN_DB, "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [names])
    return {str(n): str(s) for n, s in rows}


@dataclass(frozen=True)
class DbStats:
    """Cumulative counters of one database and of its `payments` table."""

    xact_commit: int
    xact_rollback: int
    tup_fetched: int
    tup_inserted: int
    payment_inserts: int

    def minus(self, before: DbStats) -> DbStats:
        return DbStats(
            self.xact_commit - before.xact_commit,
            self.xact_rollback - before.xact_rollback,
            self.tup_fetched - before.tup_fetched,
            self.tup_inserted - before.tup_inserted,
            self.payment_inserts - before.payment_inserts,
        )


def db_stats(db: str) -> DbStats:
    """Backends publish their counters about a second after going idle: see settled_stats().
    The three statements run in one transaction, so a read counts as one commit."""
    with psycopg.connect(dsn(db)) as conn:  # one transaction, committed on exit
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit, xact_rollback, tup_fetched, tup_inserted"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        ins = conn.execute(
            "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'payments'"
        ).fetchone()
    assert row is not None and ins is not None
    return DbStats(int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(ins[0]))


def settled_stats(
    db: str, *, first_wait_s: float = 1.2, pause_s: float = 0.5, limit_s: float = 5.0
) -> DbStats:
    """db_stats() once every backend has published its counters: after `first_wait_s` (they do
    so about a second after going idle), two reads `pause_s` apart that agree but for the reads'
    own commits (a new connection and its read commit up to two); or after `limit_s`."""
    time.sleep(first_wait_s)
    deadline = time.monotonic() + limit_s
    last = db_stats(db)
    while time.monotonic() < deadline:
        time.sleep(pause_s)
        now = db_stats(db)
        d = now.minus(last)
        if d.xact_commit <= 2 and d.xact_rollback == 0 and d.tup_inserted == 0:
            return now
        last = now
    return last


def pgbench_path() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))
    if found:
        return found[-1]
    return "pgbench"


@dataclass(frozen=True)
class PgbenchResult:
    tps: float
    latency_ms: float  # average
    transactions: int
    failed: int
    p50_ms: float
    p99_ms: float


_TPS = re.compile(r"^tps = ([\d.]+) \(without initial connection time\)", re.M)
_LAT = re.compile(r"^latency average = ([\d.]+) ms", re.M)
_TXN = re.compile(r"^number of transactions actually processed: (\d+)", re.M)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.M)


def pgbench(db: str, script: Path, clients: int, seconds: float, log_dir: Path) -> PgbenchResult:
    """pgbench -n -M prepared -f script -c N -j min(N, 2) -T seconds (whole seconds), with its
    per-transaction log in `log_dir` (for the latency percentiles)."""
    for old in log_dir.glob("pgbench_log*"):
        old.unlink()
    argv = [
        pgbench_path(),
        "-n",
        "-M",
        "prepared",
        "-f",
        str(script),
        "-c",
        str(clients),
        "-j",
        str(min(clients, 2)),
        "-T",
        str(max(1, round(seconds))),
        "-l",
        f"--log-prefix={log_dir / 'pgbench_log'}",
        "-h",
        HOST,
        "-p",
        str(PORT),
        "-U",
        USER,
        db,
    ]
    for _ in range(CONNECT_TRIES):  # the machine's PostgreSQL is shared: wait for free slots
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=seconds + 120, check=False
        )
        if "too many clients" not in done.stderr + done.stdout:
            break
        time.sleep(3)
    out = done.stdout
    tps, lat, txn = _TPS.search(out), _LAT.search(out), _TXN.search(out)
    if done.returncode != 0 or not (tps and lat and txn):
        raise RuntimeError(
            f"pgbench failed ({done.returncode}):\n{out[-2000:]}{done.stderr[-2000:]}"
        )
    failed = _FAILED.search(out)
    latencies = sorted(_logged_latencies_ms(log_dir))
    return PgbenchResult(
        tps=float(tps.group(1)),
        latency_ms=float(lat.group(1)),
        transactions=int(txn.group(1)),
        failed=int(failed.group(1)) if failed else 0,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
    )


def _logged_latencies_ms(log_dir: Path) -> list[float]:
    """Column 3 of pgbench's per-transaction log: the latency in microseconds."""
    out: list[float] = []
    for log in log_dir.glob("pgbench_log*"):
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                out.append(int(parts[2]) / 1000)
        log.unlink()
    return out
