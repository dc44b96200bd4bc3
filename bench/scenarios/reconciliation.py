"""Scenario 7, reconciliation over N (10,000) statement lines on PostgreSQL: lines/s of a whole
run (classify, record, finish) against the baseline of only fetching the statement and loading
the local instructions it names. Runs in a subprocess (bench/recon_run.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from bench import pg
from bench.context import Context
from bench.figures import Baseline, Figure, Section
from bench.procs import REPO


def run(ctx: Context) -> Section:
    p = ctx.profile
    n = p.recon_lines
    section = Section("reconciliation", f"Reconciliation over {n:,} statement lines (PostgreSQL)")
    with pg.fresh_db("recon") as db:
        spec = {"database_url": pg.url(db), "lines": n, "runs": p.runs}
        ctx.say(f"reconciliation: {n:,} payments, instructions and channel executions")
        done = subprocess.run(
            [sys.executable, "-m", "bench.recon_run", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=REPO,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"recon_run failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout)
    lines = out["lines"]
    runs = [lines / s for s in out["run_s"]]
    base = [lines / s for s in out["baseline_s"]]
    section.add(
        Figure(
            "reconciliation",
            f"{lines:,} lines, all MATCH",
            "rate",
            "lines/s",
            runs,
            Baseline("fetch statement + load local instructions", base),
            note=f"run {min(out['run_s']):.2f}-{max(out['run_s']):.2f} s",
        )
    )
    section.add(
        Figure(
            "reconciliation",
            f"{lines:,} lines, all MATCH",
            "duration",
            "s",
            out["run_s"],
            Baseline("fetch + load", out["baseline_s"]),
        )
    )
    counts = {k: v for k, v in out["counts"].items() if v}
    section.check(f"every line classified MATCH ({counts})", counts == {"MATCH": lines})
    section.check(f"run status {out['status']}", out["status"] == "DONE")
    section.notes.append(
        f"setup (bulk rows + {lines:,} channel executions) took {out['setup_s']:.1f} s; every "
        "run re-reconciles the same day (idempotent: same work each time)."
    )
    return section
