"""`idempay demo` as a user runs it: idempay shows no double charge and agrees with the bank;
the naive client that retries with a new request number double-charges under the same faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_demo_shows_idempay_exact_and_naive_retrying_double_charging(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "idempay.cli",
            "demo",
            "--payments",
            "60",
            "--json",
            "--folder",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    ours = report["results"]["idempay"]
    naive = report["results"]["naive: new request number"]
    assert report["ok"] is True
    assert ours["payments"] == 60 and ours["double_charges"] == 0
    assert ours["status_disagrees_with_bank"] == 0 and ours["not_terminal_at_end"] == 0
    assert ours["charges_at_bank"] <= 60
    assert ours["resolved_by_query"] + ours["resolved_by_callback"] > 0  # the faults did bite
    assert naive["double_charges"] > 0 and naive["overcharged_minor"] > 0
    assert started_in(tmp_path) == []  # every process the demo started is gone


def started_in(folder: Path) -> list[int]:
    """Processes whose working directory is `folder` (the demo starts its own there)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(proc, "cwd").resolve() == folder.resolve():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids
