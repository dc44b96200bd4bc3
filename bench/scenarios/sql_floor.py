"""Scenario 1, the SQL floor: pgbench running exactly the SQL of one idempay first charge, at
concurrency 1, 8, 32, on a fresh PostgreSQL database migrated by idempay itself.

Three scripts, interleaved in every round so drift hits them alike:
- `minimal_two_tx.sql`: FACTS.md's reference (INSERT, then a conditional UPDATE): the baseline of
- `first_charge_writes.sql`: idempay's write transactions, captured (bench/capture.py): THE floor
  the HTTP scenarios are measured against;
- `first_charge_wire.sql`: every round trip idempay makes for the request, reads, pool pings,
  BEGIN/ROLLBACK of read-only checkouts included (how much the round-trip count costs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import capture, pg, procs
from bench.context import Context
from bench.figures import Baseline, Figure, Section

MIN_TABLE = """CREATE TABLE bench_min_payments (
    id BIGINT PRIMARY KEY, merchant_id VARCHAR(48) NOT NULL, biz_no VARCHAR(64) NOT NULL,
    amount BIGINT NOT NULL, status VARCHAR(16) NOT NULL, version INTEGER NOT NULL DEFAULT 1,
    UNIQUE (merchant_id, biz_no))"""
MINIMAL = capture.SQL_DIR / "minimal_two_tx.sql"


def migrate(database_url: str, workdir: Path) -> None:
    env = procs.idempay_env(database_url, {"simbank": {"kind": "scripted"}})
    done = subprocess.run(
        [sys.executable, "-m", "idempay.cli", "migrate"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"idempay migrate failed:\n{done.stderr[-3000:]}")


def run(ctx: Context, *, variants: tuple[str, ...] = ("minimal", "writes", "wire")) -> Section:
    section = Section("sql_floor", "SQL floor: pgbench, idempay's own statements")
    p = ctx.profile
    ctx.say("sql_floor: capturing the statements of one first charge")
    captured = capture.capture_scripts(ctx.sql_dir)
    scripts = {"minimal": MINIMAL, "writes": captured.writes, "wire": captured.wire}
    rt = captured.round_trips
    section.notes.append(
        f"One keyed first charge over HTTP = {rt['checkouts']} pool checkouts, "
        f"{rt['statements']} statements, {rt['wire_round_trips']} round trips to PostgreSQL; "
        f"its {rt['write_transactions']} write transactions alone: {rt['write_statements']} "
        f"statements, {rt['writes_round_trips']} round trips (bench/sql/first_charge_*.sql)."
    )
    logs = ctx.folder("pgbench")
    with pg.fresh_db("floor") as db:
        migrate(pg.url(db), ctx.workdir)
        pg.execute(db, capture.setup_sql())
        pg.execute(db, MIN_TABLE)
        pg.pgbench(db, captured.writes, 8, 1, logs)  # warm-up, not reported
        tps: dict[tuple[str, int], list[float]] = {}
        p50: dict[tuple[str, int], list[float]] = {}
        p99: dict[tuple[str, int], list[float]] = {}
        for r in range(p.runs):
            for c in p.concurrency:
                for v in variants:
                    res = pg.pgbench(db, scripts[v], c, p.floor_s, logs)
                    tps.setdefault((v, c), []).append(res.tps)
                    p50.setdefault((v, c), []).append(res.p50_ms)
                    p99.setdefault((v, c), []).append(res.p99_ms)
                    ctx.say(f"sql_floor run {r + 1}: {v} c={c}: {res.tps:.0f} tx/s")
    for c in p.concurrency:
        _figures(section, c, variants, tps, p50, p99)
        if "writes" in variants:
            ctx.floor[c] = Baseline(f"SQL floor c={c}", tps[("writes", c)])
            ctx.floor_latency[c] = {
                "p50": Baseline(f"SQL floor p50 c={c}", p50[("writes", c)]),
                "p99": Baseline(f"SQL floor p99 c={c}", p99[("writes", c)]),
            }
    section.notes.append(
        "FACTS.md measured the minimal two-transaction payment at 1,165 / 3,615 / 4,012 tx/s "
        "(1 / 8 / 32 clients) on a quiet machine of this kind; compare only within this run."
    )
    return section


def _figures(
    section: Section,
    c: int,
    variants: tuple[str, ...],
    tps: dict[tuple[str, int], list[float]],
    p50: dict[tuple[str, int], list[float]],
    p99: dict[tuple[str, int], list[float]],
) -> None:
    if "minimal" in variants:
        section.add(
            Figure(
                "sql_floor",
                f"minimal 2-tx payment c={c}",
                "rate",
                "tx/s",
                tps[("minimal", c)],
                note="reference (FACTS.md shape)",
            )
        )
    if "writes" in variants:
        base = (
            Baseline(f"minimal 2-tx c={c}", tps[("minimal", c)]) if "minimal" in variants else None
        )
        section.add(
            Figure(
                "sql_floor",
                f"idempay writes c={c}",
                "rate",
                "charges/s",
                tps[("writes", c)],
                base,
                note="THE floor",
            )
        )
        section.add(
            Figure(
                "sql_floor",
                f"idempay writes c={c}",
                "p99",
                "ms",
                p99[("writes", c)],
                note=f"p50 {_median(p50[('writes', c)]):.1f} ms",
            )
        )
    if "wire" in variants and "writes" in variants:
        base = Baseline(f"idempay writes c={c}", tps[("writes", c)])
        section.add(
            Figure(
                "sql_floor",
                f"idempay wire (all round trips) c={c}",
                "rate",
                "charges/s",
                tps[("wire", c)],
                base,
            )
        )


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]
