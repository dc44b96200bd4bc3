"""Runs the demo: idempay (simulator + serve + worker as real processes, on SQLite) and two naive
clients, each against its own fresh simulator with the same faults and the same payments."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import func, select

from idempay.demo import report
from idempay.demo.procs import Idempay, Procs, Simbank
from idempay.demo.workload import RetryPolicy, Run, drive, idempay_sender, naive_sender, payments
from idempay.storage import tables as t
from idempay.storage.engine import create_engine

FAULTS: dict[str, Any] = {
    "drop_response_rate": 0.2,  # executed, answer lost (half-open)
    "timeout_rate": 0.1,  # executed, answer held past the client's deadline
    "timeout_hold_ms": 1500,
    "error_rate": 0.05,  # 5xx, not executed
    "callback_duplicate_rate": 0.3,
    "callback_loss_rate": 0.2,
    "callback_delay_ms": 200,
    "idempotency": False,  # the channel's own idempotency has failed (seeds/002)
}
SETTLE_TIMEOUT_S = 60.0


async def _resolutions(idem: Idempay) -> tuple[Counter[str], int]:
    engine = create_engine(idem.database_url)
    tr = t.transitions.c
    q = (
        select(tr.actor, func.count())
        .where(tr.entity == "instruction", tr.to_status.in_(["SUCCESS", "FAILED"]))
        .group_by(tr.actor)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(q)).all()
        reviews = (
            await conn.execute(
                select(func.count()).select_from(t.reviews).where(t.reviews.c.status == "OPEN")
            )
        ).scalar_one()
    await engine.dispose()
    resolved: Counter[str] = Counter()
    for actor, n in rows:
        if actor.startswith("worker:"):
            resolved["query"] += n
        elif actor.startswith("channel:"):
            resolved["callback"] += n
    return resolved, int(reviews)


async def run(
    n: int, seed: int, concurrency: int, folder: Path, progress: Progress
) -> dict[str, Any]:
    procs = Procs(folder)
    policy = RetryPolicy()
    plan = payments(n, seed)
    result: dict[str, dict[str, Any]] = {}
    try:
        sim = Simbank(procs, "simbank-idempay")
        sim.faults(**FAULTS, seed=seed)
        idem = Idempay(procs, sim)
        idem.start_serve()
        idem.start_worker()
        task = progress.add_task("idempay (serve killed once)", total=n)
        runs = Run()
        killer = asyncio.create_task(idem.kill_serve_midway(runs, n))
        await drive(
            plan,
            idempay_sender(idem.url, idem.api_key, policy.timeout_s),
            policy,
            concurrency,
            runs,
            lambda k: progress.advance(task, k),
        )
        await killer
        sim.faults(seed=seed)  # faults healed; the worker finds every outcome
        settle = progress.add_task("idempay worker settling", total=None)
        await idem.wait_settled(SETTLE_TIMEOUT_S)
        progress.update(settle, total=1, completed=1)
        books = await idem.payments()
        ledger = sim.ledger()
        ref_of = {p["biz_no"]: p["id"] for p in books}
        result["idempay"] = report.facts(runs.outcomes, ledger, ref_of)
        result["idempay"].update(report.idempay_books(books, ledger, *await _resolutions(idem)))
        for column, new_number in ((report.COLUMNS[1], True), (report.COLUMNS[2], False)):
            naive_sim = Simbank(procs, f"simbank-{'new' if new_number else 'same'}")
            naive_sim.faults(**FAULTS, seed=seed)
            task = progress.add_task(column, total=n)
            sender = naive_sender(naive_sim.url, policy.timeout_s, new_number_each_retry=new_number)

            def advance(k: int, tk: Any = task) -> None:
                progress.advance(tk, k)

            naive = await drive(plan, sender, policy, concurrency, Run(), advance)
            naive_sim.faults(seed=seed)
            result[column] = report.facts(
                naive.outcomes, naive_sim.ledger(), {p.biz_no: p.biz_no for p in plan}
            )
    finally:
        procs.stop_all()
    return result


def main(n: int, seed: int, concurrency: int, folder: Path | None, as_json: bool) -> int:
    """Run the demo, print the report (or JSON); 1 when idempay double-charged or disagrees."""
    import json

    console = Console(stderr=as_json)
    started = time.monotonic()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with tempfile.TemporaryDirectory(prefix="idempay-demo-") as tmp:
        where = folder or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        with Progress(*columns, console=console, transient=as_json) as progress:
            result = asyncio.run(run(n, seed, concurrency, where, progress))
    settings = {
        "faults": FAULTS,
        "seed": seed,
        "payments": n,
        "seconds": time.monotonic() - started,
    }
    ours = result["idempay"]
    ok = ours["double_charges"] == 0 and ours["status_disagrees_with_bank"] == 0
    if as_json:
        print(json.dumps({"ok": ok, "settings": settings, "results": result}, indent=2))
    else:
        report.show(result, settings, console)
        verdict = "[bold green]idempay: no double charge, every status agrees with the bank[/]"
        console.print(verdict if ok else "[bold red]idempay FAILED its promise[/]")
    return 0 if ok else 1
