"""`python -m bench [--quick] [--only NAME ...] [--big] [--runs N] [--out DIR] [--keep]`: run the
scenarios, print the table, write <out>/latest.json and latest.md (default bench/results)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from bench import machine, report
from bench.capture import SQL_DIR
from bench.context import Context
from bench.figures import Section
from bench.profile import BIG_GROWTH, FULL, QUICK

RESULTS = Path(__file__).parent / "results"
NAMES = (
    "sql_floor",
    "first_charges",
    "replays",
    "storm",
    "overhead",
    "growth",
    "reconciliation",
    "worker",
    "peer",
)


def _scenarios(only: set[str]) -> list[tuple[str, Callable[[Context], Section]]]:
    from bench.scenarios import (
        growth,
        http,
        overhead,
        peer,
        reconciliation,
        sql_floor,
        storm,
        worker,
    )

    chosen: list[tuple[str, Callable[[Context], Section]]] = []
    if "sql_floor" in only:
        chosen.append(("sql_floor", sql_floor.run))
    if "replays" in only:  # replays are measured against first charges: one pass does both
        chosen.append(("replays", lambda ctx: http.run(ctx, replays=True)))
    elif "first_charges" in only:
        chosen.append(("first_charges", lambda ctx: http.run(ctx, replays=False)))
    chosen += [
        (n, m.run)
        for n, m in (
            ("storm", storm),
            ("overhead", overhead),
            ("growth", growth),
            ("reconciliation", reconciliation),
            ("worker", worker),
            ("peer", peer),
        )
        if n in only
    ]
    return chosen


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small counts, about 2 minutes")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these scenarios (repeatable or comma-separated): {', '.join(NAMES)}",
    )
    ap.add_argument("--big", action="store_true", help="growth up to 10M payments (long)")
    ap.add_argument("--runs", type=int, help="measured runs per figure (default 3)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where latest.json/.md go")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (logs)")
    args = ap.parse_args(argv)
    only = {n.strip() for item in args.only for n in item.split(",") if n.strip()}
    if unknown := only - set(NAMES):
        ap.error(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(NAMES)}")
    args.only_set = only or set(NAMES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    console = Console(width=max(160, shutil.get_terminal_size().columns))
    profile = (QUICK if args.quick else FULL).with_runs(args.runs)
    if args.big:
        profile = replace(profile, growth_points=BIG_GROWTH)
    workdir = Path(tempfile.mkdtemp(prefix="idempay-bench-"))
    sql_dir = SQL_DIR if args.out.resolve() == RESULTS.resolve() else args.out / "sql"
    ctx = Context(profile, workdir, console, sql_dir)
    started, t0 = datetime.now(UTC), time.monotonic()
    info = machine.describe()
    console.log(
        f"bench profile {profile.name}, scratch {workdir}, machine {info['cpu']} x{info['nproc']}"
    )
    sections: list[Section] = []
    try:
        for name, scenario in _scenarios(args.only_set):
            s0 = time.monotonic()
            try:
                section = scenario(ctx)
            except Exception as e:
                console.log(f"[red]{name} failed[/]: {e}")
                section = Section(name, name, error=f"{type(e).__name__}: {e}"[:2000])
                section.notes.append(traceback.format_exc(limit=4)[-1500:])
            section.seconds = time.monotonic() - s0
            sections.append(section)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta = {
        "profile": profile.name,
        "runs": profile.runs,
        "only": sorted(args.only_set),
        "big": args.big,
        "started": started.strftime("%Y-%m-%d %H:%M"),
        "seconds": time.monotonic() - t0,
    }
    report.print_sections(console, sections)
    report.write(args.out, info, meta, sections)
    console.log(f"wrote {args.out / 'latest.json'} and latest.md in {meta['seconds']:.0f} s")
    failed = [s.name for s in sections if s.error] + [
        label for s in sections for label, ok in s.checks if not ok
    ]
    if failed:
        console.log(f"[red]problems[/]: {failed}")
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
