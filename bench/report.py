"""The output: a Rich table on the terminal, and bench/results/latest.json + latest.md."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.figures import Figure, Section


def _num(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cells(f: Figure) -> list[str]:
    lo, hi = f.spread
    base = f.baseline
    ratio = f.ratio
    return [
        f.case,
        f.metric,
        f"{_num(f.median)} {f.unit}",
        f"{_num(lo)}-{_num(hi)}",
        "—" if base is None else f"{_num(base.median)} ({base.label})",
        "—" if ratio is None else f"{ratio:.2f}x",
        " ".join(x for x in (f.target and f"target {f.target}", f.note) if x),
    ]


HEADERS = ["case", "metric", "median", "min-max", "baseline (same run)", "ratio", "notes"]


def table(section: Section) -> Table:
    t = Table(title=f"{section.title} ({section.seconds:.0f} s)", title_justify="left")
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for f in section.figures:
        t.add_row(*_cells(f))
    return t


def print_sections(console: Console, sections: list[Section]) -> None:
    for s in sections:
        console.print(table(s))
        for label, ok in s.checks:
            console.print(f"  [{'green' if ok else 'red'}]{'PASS' if ok else 'FAIL'}[/] {label}")
        for note in s.notes:
            console.print(f"  · {note}")
        if s.error:
            console.print(f"  [red]ERROR[/] {s.error}")


def write(
    out_dir: Path, machine: dict[str, Any], args: dict[str, Any], sections: list[Section]
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {"machine": machine, "args": args, "sections": [s.as_dict() for s in sections]}
    (out_dir / "latest.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "latest.md").write_text(markdown(machine, args, sections))


def markdown(machine: dict[str, Any], args: dict[str, Any], sections: list[Section]) -> str:
    lines = ["# idempay bench — latest run", ""]
    lines.append(
        f"Profile `{args.get('profile')}`, {args.get('started')} UTC, "
        f"{args.get('seconds', 0):.0f} s in all. Medians of {args.get('runs')} runs (min-max); "
        "every baseline was measured in this same invocation."
    )
    lines += ["", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    for s in sections:
        lines += ["", f"## {s.title}", "", f"`--only {s.name}`, {s.seconds:.0f} s", ""]
        lines.append("| " + " | ".join(HEADERS) + " |")
        lines.append("|" + "---|" * len(HEADERS))
        for f in s.figures:
            lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(f)) + " |")
        if s.checks:
            lines.append("")
            lines += [f"- {'PASS' if ok else '**FAIL**'}: {label}" for label, ok in s.checks]
        if s.notes:
            lines.append("")
            lines += [f"- {note}" for note in s.notes]
        if s.error:
            lines += ["", f"**ERROR**: {s.error}"]
    return "\n".join(lines) + "\n"
