"""The demo's numbers, from the ground truth (each simulator's ledger) and idempay's own books."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import quantiles
from typing import Any

from rich.console import Console
from rich.table import Table

from idempay.demo.workload import DEFINITIVE, Outcome

COLUMNS = ("idempay", "naive: new request number", "naive: same request number")


def charges_by_ref(ledger: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_ref: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in ledger:
        if e["kind"] == "PAY" and e["status"] == "SUCCESS":
            by_ref[e["payment_ref"]].append(e)
    return by_ref


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return quantiles(values, n=100, method="inclusive")[q - 1]


def facts(
    outcomes: list[Outcome], ledger: list[dict[str, Any]], ref_of: dict[str, str]
) -> dict[str, Any]:
    """`ref_of` maps biz_no to the payment_ref the bank saw (idempay's payment id, or biz_no)."""
    by_ref = charges_by_ref(ledger)
    amounts = {o.biz_no: o.amount for o in outcomes}
    counts = {biz: len(by_ref.get(ref, [])) for biz, ref in ref_of.items()}
    latencies = [o.latency_s * 1000 for o in outcomes]
    return {
        "payments": len(outcomes),
        "requests_sent": sum(o.sends for o in outcomes),
        "charges_at_bank": sum(len(v) for v in by_ref.values()),
        "double_charges": sum(1 for n in counts.values() if n > 1),
        "overcharged_minor": sum((n - 1) * amounts[b] for b, n in counts.items() if n > 1),
        "unknown_to_client": sum(1 for o in outcomes if o.status not in DEFINITIVE),
        "p50_ms": round(_percentile(latencies, 50), 1),
        "p99_ms": round(_percentile(latencies, 99), 1),
    }


def idempay_books(
    payments: list[dict[str, Any]],
    ledger: list[dict[str, Any]],
    resolved: Counter[str],
    reviews: int,
) -> dict[str, Any]:
    """Where idempay's statuses stand against the bank's truth, after the worker's work."""
    by_ref = charges_by_ref(ledger)
    disagree = [
        p["biz_no"] for p in payments if (p["status"] == "SUCCESS") != bool(by_ref.get(p["id"]))
    ]
    return {
        "not_terminal_at_end": sum(1 for p in payments if p["status"] not in DEFINITIVE),
        "status_disagrees_with_bank": len(disagree),
        "disagreeing": disagree[:10],
        "resolved_by_query": resolved["query"],
        "resolved_by_callback": resolved["callback"],
        "review_items": reviews,
    }


ROWS = (
    ("payments", "payments"),
    ("requests_sent", "requests sent (with retries)"),
    ("charges_at_bank", "charges executed at the bank"),
    ("double_charges", "double charges"),
    ("overcharged_minor", "money overcharged (CNY)"),
    ("unknown_to_client", "no final outcome when client left"),
    ("not_terminal_at_end", "outcomes still unknown at the end"),
    ("status_disagrees_with_bank", "status disagrees with the bank"),
    ("resolved_by_query", "resolved by query (worker)"),
    ("resolved_by_callback", "resolved by callback"),
    ("review_items", "review items (待人工确认)"),
    ("p50_ms", "p50 latency (ms)"),
    ("p99_ms", "p99 latency (ms)"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "overcharged_minor":
        return f"{value / 100:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(result: dict[str, dict[str, Any]]) -> Table:
    t = Table(title="idempay demo: the same payments, the same faults", show_lines=False)
    t.add_column("")
    for col in COLUMNS:
        t.add_column(col, justify="right", style="bold green" if col == "idempay" else "red")
    for key, label in ROWS:
        t.add_row(label, *(_cell(key, result[c].get(key)) for c in COLUMNS))
    return t


def show(result: dict[str, dict[str, Any]], settings: dict[str, Any], console: Console) -> None:
    console.print(table(result))
    faults = ", ".join(f"{k}={v}" for k, v in settings["faults"].items())
    console.print(
        f"[dim]faults: {faults}; serve killed with SIGKILL once mid-run; "
        f"{settings['seconds']:.1f} s[/dim]"
    )
