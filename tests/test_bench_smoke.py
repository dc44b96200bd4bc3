"""Keeps bench/ from rotting: the SQL-floor scenario runs end to end (capture, pgbench, report).
No timing is asserted here; only that the harness works and reports figures."""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import dbs

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_quick_sql_floor_runs_and_writes_its_report(tmp_path: Path) -> None:
    dbs.require("postgresql")
    pgbench = glob.glob("/usr/lib/postgresql/*/bin/pgbench") or shutil.which("pgbench")
    assert pgbench, "pgbench (installed with the PostgreSQL server) is needed"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "sql_floor",
            "--runs",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    (floor,) = report["sections"]
    assert floor["name"] == "sql_floor" and floor["error"] is None
    rates = [f for f in floor["figures"] if f["metric"] == "rate"]
    assert rates and all(f["median"] > 0 for f in rates)
    assert {"nproc", "python", "postgresql"} <= set(report["machine"])
    assert (tmp_path / "latest.md").read_text().startswith("# idempay bench")
    assert (tmp_path / "sql" / "first_charge_writes.sql").exists()  # not bench/sql: a test run
