"""A process killed after the channel executed but before transaction B: nothing is lost, nothing
is sent again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.config import Settings
from idempay.services.payments import ChargeCommand

ROOT = Path(__file__).resolve().parents[2]


async def test_sigkill_between_the_channel_and_transaction_b_leaves_a_recoverable_pending(
    database_url: str, tmp_path: Path
) -> None:
    c = await bootstrap.build(Settings(database_url=database_url), channels={})
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    await c.aclose()
    ledger = tmp_path / "ledger.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.charge_proc",
            database_url,
            merchant,
            "PAY_CRASH",
            str(ledger),
            str(time.time()),
            "--die-after-send",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    [executed] = [json.loads(line) for line in ledger.read_text().splitlines()]

    # "restart": a new process-worth of objects on the same database
    channel = ScriptedChannel("scripted")
    c = await bootstrap.build(Settings(database_url=database_url), channels={"scripted": channel})
    payment = await c.store.get_payment(merchant, "PAY_CRASH")
    assert payment is not None and payment.status == "PROCESSING"
    [instruction] = (await c.store.payment_view(payment)).instructions
    assert instruction.status == "PENDING"
    assert instruction.request_id == executed["request_id"]  # the worker can query this very id
    assert instruction.next_query_at is not None

    again = await c.payments.charge(
        merchant, ChargeCommand("PAY_CRASH", "ORD001", 19900, "CNY", "scripted")
    )
    assert (again.replayed, again.view.payment.status) == (True, "PROCESSING")
    assert channel.calls == 0
    await c.aclose()
