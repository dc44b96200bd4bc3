"""The reconciliation measurement, in its own process (`python -m bench.recon_run '<json>'`):
N local payments + SUCCESS instructions created in bulk, the same N executions in an in-process
`ScriptedChannel`, then, interleaved per round, the baseline (fetch the statement and load the
local instructions) and a whole reconciliation run (`Container.reconciliation.start` + `.run`)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert

from idempay import bootstrap, logs
from idempay.channels.scripted import ScriptedChannel
from idempay.config import Settings
from idempay.domain.model import OpKind, Payment, new_id
from idempay.domain.ports import ChannelOp
from idempay.domain.states import InstructionStatus, PaymentStatus
from idempay.services.sending import new_instruction
from idempay.storage import tables as t

CHANNEL = "simbank"
BATCH = 2_000


async def _populate(container: bootstrap.Container, channel: ScriptedChannel, n: int) -> None:
    merchant_id, _ = await bootstrap.create_principal(container.store, "recon", operator=False)
    clock = container.clock
    for lo in range(0, n, BATCH):
        payments, instructions = [], []
        for i in range(lo, min(n, lo + BATCH)):
            now = clock.now()
            p = Payment(
                new_id("pay", now),
                merchant_id,
                f"R{i}",
                f"RO{i}",
                1000 + i % 500,
                "CNY",
                CHANNEL,
                PaymentStatus.SUCCESS,
                1,
                0,
                0,
                0,
                None,
                None,
                2,
                now,
                now,
            )
            ins = new_instruction(
                clock,
                merchant_id=merchant_id,
                payment_id=p.id,
                owner_kind="payment",
                owner_id=p.id,
                kind=OpKind.PAY,
                channel=CHANNEL,
                amount=p.amount,
                currency="CNY",
                attempt=1,
                stale_pending_s=30,
            )
            payments.append(_row(p))
            instructions.append({**_row(ins), "status": InstructionStatus.SUCCESS})
            op = ChannelOp(ins.request_id, OpKind.PAY, p.id, p.amount, "CNY", None)
            await channel.execute(op)
        async with container.store.begin() as tx:
            await tx.conn.execute(insert(t.payments), payments)
            await tx.conn.execute(insert(t.instructions), instructions)


def _row(obj: Any) -> dict[str, Any]:
    """A dataclass's fields, shallow: `dataclasses.asdict` deep-copies every value, which took
    70% of the setup at 100,000 lines."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


async def _baseline(container: bootstrap.Container, channel: ScriptedChannel, day: Any) -> float:
    t0 = time.perf_counter()
    lines = await channel.statement(day)
    await container.reconciliation.books.instructions([ln.request_id for ln in lines])
    return time.perf_counter() - t0


async def _reconcile(container: bootstrap.Container, day: Any) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    run_id = await container.reconciliation.start(CHANNEL, day)
    assert run_id is not None
    run = await container.reconciliation.run(run_id, CHANNEL, day)
    return time.perf_counter() - t0, run


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    logs.configure("json", level=logging.WARNING)
    channel = ScriptedChannel(CHANNEL)
    settings = Settings(database_url=spec["database_url"], log_format="json")
    container = await bootstrap.build(settings, channels={CHANNEL: channel})
    try:
        t0 = time.perf_counter()
        await _populate(container, channel, spec["lines"])
        setup_s = time.perf_counter() - t0
        day = datetime.now(UTC).date()
        await _baseline(container, channel, day)  # warm-up, not reported
        _, run = await _reconcile(container, day)
        baseline, runs = [], []
        for _ in range(spec["runs"]):
            baseline.append(await _baseline(container, channel, day))
            seconds, run = await _reconcile(container, day)
            runs.append(seconds)
        return {
            "setup_s": setup_s,
            "baseline_s": baseline,
            "run_s": runs,
            "status": run["status"],
            "counts": run["counts"],
            "error": run.get("error"),
            "lines": len(await channel.statement(day)),
        }
    finally:
        await container.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
