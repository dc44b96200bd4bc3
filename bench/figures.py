"""What a scenario reports: figures (one value per run; median and min-max spread), each next to
its baseline measured in the same invocation, and the ratio between them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100); NaN when empty."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return float(sorted_values[rank - 1])


@dataclass
class Baseline:
    label: str
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")


@dataclass
class Figure:
    scenario: str
    case: str
    metric: str
    unit: str
    runs: list[float]
    baseline: Baseline | None = None
    target: str = ""  # e.g. "ratio >= 0.50" (reported against, never asserted)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.runs), max(self.runs)) if self.runs else (float("nan"), float("nan"))

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or not self.runs or not self.baseline.runs:
            return None
        base = self.baseline.median
        return self.median / base if base else None

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.spread
        return {
            "scenario": self.scenario,
            "case": self.case,
            "metric": self.metric,
            "unit": self.unit,
            "median": _round(self.median),
            "min": _round(lo),
            "max": _round(hi),
            "runs": [_round(r) for r in self.runs],
            "baseline": None
            if self.baseline is None
            else {
                "label": self.baseline.label,
                "median": _round(self.baseline.median),
                "runs": [_round(r) for r in self.baseline.runs],
            },
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "target": self.target,
            "note": self.note,
            **({"extra": self.extra} if self.extra else {}),
        }


def _round(value: float) -> float:
    if value != value:  # NaN
        return value
    return round(value, 3) if abs(value) < 100 else round(value, 1)


@dataclass
class Section:
    """One scenario's figures, notes (what was checked, what it means) and timing."""

    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def check(self, label: str, ok: bool) -> None:
        """An assertion reported in the output (never a test failure)."""
        self.checks.append((label, ok))

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "seconds": round(self.seconds, 1),
            "error": self.error,
            "figures": [f.as_dict() for f in self.figures],
            "checks": [{"check": label, "ok": ok} for label, ok in self.checks],
            "notes": self.notes,
        }
