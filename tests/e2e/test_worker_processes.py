"""Worker processes on PostgreSQL against a real simulator: a paused worker whose lease ran out
cannot apply its stale answer over the newer state another worker found."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import select

from idempay import bootstrap
from idempay.channels.simbank import SimbankChannel
from idempay.config import Settings
from idempay.domain.states import Entity
from idempay.services.payments import ChargeCommand
from idempay.storage import tables as t
from tests.simbank_proc import running_simbank

ROOT = Path(__file__).resolve().parents[2]


def worker(url: str, sim_url: str, secret: str, *args: str) -> subprocess.Popen[str]:
    channels = {"simbank": {"kind": "simbank", "base_url": sim_url, "secret": secret}}
    env = {
        **os.environ,
        "IDEMPAY_DATABASE_URL": url,
        "IDEMPAY_CHANNELS": json.dumps(channels),
        "IDEMPAY_WORKER_LEASE_MS": "1500",
        "IDEMPAY_WORKER_POLL_MS": "200",
        "IDEMPAY_LOG_FORMAT": "json",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "idempay.cli", "worker", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a_worker_paused_past_its_lease_does_not_apply_its_stale_answer(
    postgres_url: str, tmp_path: Path
) -> None:
    with running_simbank(tmp_path) as sim:
        sim.faults(async_rate=1, async_settle_ms=5000, latency_ms=600)
        channel = SimbankChannel("simbank", sim.url, sim.secret)
        c = await bootstrap.build(
            Settings(database_url=postgres_url), channels={"simbank": channel}
        )
        merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
        view = (
            await c.payments.charge(merchant, ChargeCommand("PAY_1", "O1", 19900, "CNY", "simbank"))
        ).view
        assert view.payment.status == "PROCESSING"
        rid = view.instructions[0].request_id

        a = worker(postgres_url, sim.url, sim.secret)
        deadline = time.time() + 20
        while time.time() < deadline:  # wait until A holds the lease, its query in flight
            ins = await c.store.get_instruction(rid)
            if ins is not None and ins.lease_owner:
                break
            time.sleep(0.02)
        assert ins is not None and ins.lease_owner
        time.sleep(0.2)
        a.send_signal(signal.SIGSTOP)  # the channel will answer A "PROCESSING", and A sleeps
        try:
            time.sleep(6)  # the channel settles SUCCESS; A's lease (1.5 s) is long over
            b = worker(postgres_url, sim.url, sim.secret, "--once")
            _, b_err = b.communicate(timeout=60)
            assert b.returncode == 0, b_err
            resolved = await c.store.get_instruction(rid)
            assert resolved is not None and resolved.status == "SUCCESS"
        finally:
            a.send_signal(signal.SIGCONT)
        time.sleep(2)  # A wakes up with its stale "PROCESSING" and tries to write it
        a.send_signal(signal.SIGTERM)
        _, a_err = a.communicate(timeout=20)
        assert "Traceback" not in a_err, a_err
        assert "resolution.stale_answer_dropped" in a_err  # A did hear "PROCESSING", too late
        assert await c.store.get_instruction(rid) == resolved
        log = await c.store.transition_log(Entity.INSTRUCTION, rid)
        terminal = [r for r in log if r["to_status"] in ("SUCCESS", "FAILED")]
        assert len(terminal) == 1 and terminal[0]["actor"] != f"worker:{ins.lease_owner}"
        assert (await c.payments.get(merchant, "PAY_1")).payment.status == "SUCCESS"
        assert len([e for e in sim.ledger() if e["status"] == "SUCCESS"]) == 1
        async with c.engine.connect() as conn:
            q = select(t.payments.c.status)
            assert list((await conn.execute(q)).scalars()) == ["SUCCESS"]
        await c.aclose()
