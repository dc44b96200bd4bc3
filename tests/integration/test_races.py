"""Races with real threads and processes on real databases: exactly one winner, losers answered."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import func, select

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.clock import SystemClock
from idempay.config import Settings
from idempay.domain.errors import DuplicateKey
from idempay.domain.model import ChargeResult, Instruction
from idempay.domain.ports import Change
from idempay.domain.states import Entity
from idempay.services.payments import ChargeCommand
from idempay.storage import tables as t

ROOT = Path(__file__).resolve().parents[2]


def cmd(biz_no: str = "PAY_RACE") -> ChargeCommand:
    return ChargeCommand(biz_no, "ORD001", 19900, "CNY", "scripted")


async def rows(container: bootstrap.Container, table: t.Table) -> int:
    async with container.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


def in_threads(n: int, url: str, work: object) -> list[object]:
    """Run `work(container)` in n threads, each with its own event loop and engine, all released
    at the same moment by a barrier."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i: int) -> None:
        async def go() -> object:
            c = await bootstrap.build(
                Settings(database_url=url),
                channels=work.channels,  # type: ignore[attr-defined]
                run_migrations=False,
                null_pool=True,
            )
            try:
                barrier.wait()
                return await work(c)  # type: ignore[operator]
            finally:
                await c.aclose()

        try:
            results[i] = asyncio.run(go())
        except BaseException as e:  # collected and asserted on by the caller
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return results


class Charge:
    def __init__(self, merchant: str, channel: ScriptedChannel) -> None:
        self.merchant = merchant
        self.channels = {"scripted": channel}

    async def __call__(self, c: bootstrap.Container) -> ChargeResult:
        return await c.payments.charge(self.merchant, cmd())


async def test_fifty_threads_on_one_biz_no_execute_once_and_all_get_that_payment(
    container: bootstrap.Container, merchant: str, database_url: str
) -> None:
    channel = ScriptedChannel("scripted", delay_s=0.05)
    results = await asyncio.to_thread(in_threads, 50, database_url, Charge(merchant, channel))
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    ids = {r.view.payment.id for r in results}  # type: ignore[union-attr]
    assert len(ids) == 1
    assert sum(r.created for r in results) == 1  # type: ignore[union-attr]
    assert channel.calls == 1 and len(channel.executions()) == 1
    assert channel.executions()[0].payment_ref == ids.pop()
    assert await rows(container, t.payments) == 1
    assert await rows(container, t.instructions) == 1


async def test_four_processes_on_one_biz_no_execute_once(postgres_url: str, tmp_path: Path) -> None:
    c = await bootstrap.build(Settings(database_url=postgres_url), channels={})
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    ledger = tmp_path / "ledger.jsonl"
    start_at = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.charge_proc",
                postgres_url,
                merchant,
                "PAY_PROC",
                str(ledger),
                str(start_at),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    answers = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert len({a["payment_id"] for a in answers}) == 1
    assert sum(a["created"] for a in answers) == 1
    assert len(ledger.read_text().splitlines()) == 1
    assert await rows(c, t.payments) == 1
    await c.aclose()


async def test_two_concurrent_cas_transitions_one_wins_the_loser_sees_the_winner(
    container: bootstrap.Container, merchant: str, channel: ScriptedChannel, database_url: str
) -> None:
    from idempay.channels.scripted import Behavior

    channel.plan(Behavior.HALF_OPEN)
    view = (await container.payments.charge(merchant, cmd("PAY_CAS"))).view
    ins = view.instructions[0]
    assert ins.status == "UNKNOWN"

    class Resolve:
        channels = {"scripted": channel}

        def __init__(self) -> None:
            self.i = 0

        async def __call__(self, c: bootstrap.Container) -> tuple[str, bool]:
            self.i += 1
            outcome = "SUCCESS" if self.i % 2 else "FAILED"
            async with c.store.begin() as tx:
                won = await tx.transition(
                    Change(Entity.INSTRUCTION, ins.request_id, "UNKNOWN", outcome, "race", "test")
                )
            return outcome, won

    results = await asyncio.to_thread(in_threads, 2, database_url, Resolve())
    assert not [r for r in results if isinstance(r, BaseException)], results
    winners = [r for r in results if r[1]]  # type: ignore[index]
    assert len(winners) == 1
    latest = await container.store.get_instruction(ins.request_id)
    assert latest is not None and latest.status == winners[0][0]  # type: ignore[index]
    assert latest.version == ins.version + 1
    log = await container.store.transition_log(Entity.INSTRUCTION, ins.request_id)
    assert [r["to_status"] for r in log].count(latest.status) == 1
    assert not [
        r
        for r in log
        if r["to_status"] in ("SUCCESS", "FAILED") and r["to_status"] != latest.status
    ]


def live(template: Instruction, request_id: str, status: str = "PENDING") -> Instruction:
    from dataclasses import replace

    return replace(template, request_id=request_id, status=status, attempt=template.attempt + 1)


async def test_the_database_allows_one_live_instruction_per_payment(
    container: bootstrap.Container, merchant: str, channel: ScriptedChannel
) -> None:
    from idempay.channels.scripted import Behavior

    channel.plan(Behavior.HALF_OPEN)
    view = (await container.payments.charge(merchant, cmd("PAY_LIVE"))).view
    first = view.instructions[0]
    for status in ("PENDING", "PROCESSING", "UNKNOWN"):
        try:
            async with container.store.begin() as tx:
                await tx.insert_instruction(live(first, f"req_second_{status}", status))
        except DuplicateKey as e:
            assert e.constraint == "instruction_live"
        else:
            raise AssertionError(f"a second live ({status}) instruction was accepted")
    # once the first is terminal, a new attempt may be written
    async with container.store.begin() as tx:
        assert await tx.transition(
            Change(Entity.INSTRUCTION, first.request_id, "UNKNOWN", "FAILED", "test", "test")
        )
        await tx.insert_instruction(live(first, "req_third"))
    async with container.store.begin() as tx:
        await tx.insert_instruction(
            live(first, "req_done", "FAILED")
        )  # terminal rows never collide


async def test_clock_is_injected_into_every_timestamp(
    database_url: str, channel: ScriptedChannel
) -> None:
    from idempay.clock import ManualClock

    clock = ManualClock()
    c = await bootstrap.build(
        Settings(database_url=database_url), clock=clock, channels={"scripted": channel}
    )
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    view = (await c.payments.charge(merchant, cmd())).view
    assert view.payment.created_at == clock.now() == view.instructions[0].created_at
    assert SystemClock().now() > clock.now()
    await c.aclose()
