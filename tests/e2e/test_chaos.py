"""The chaos test: a real simulator with faults (half-open, timeouts, 5xx, lost callbacks, a channel
whose idempotency failed), `idempay serve` killed with SIGKILL mid-run and restarted, clients
retrying with the same biz_no; then the faults heal and `idempay worker` runs. The simulator's
ledger is the truth: at most one charge per payment, and idempay agrees with it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from idempay.demo.procs import Idempay, Procs, Simbank
from idempay.demo.report import charges_by_ref
from idempay.demo.workload import RetryPolicy, Run, drive, idempay_sender, payments
from tests import dbs

N = 200
FAULTS = {
    "drop_response_rate": 0.3,
    "timeout_rate": 0.1,
    "timeout_hold_ms": 1500,
    "error_rate": 0.1,
    "callback_loss_rate": 0.3,
    "callback_duplicate_rate": 0.2,
    "idempotency": False,
}


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url, name = dbs.create(request.param, tmp_path)
    yield url
    dbs.drop(request.param, name)


async def test_under_faults_and_a_crash_every_payment_is_charged_at_most_once_and_found(
    url: str, tmp_path: Path
) -> None:
    procs = Procs(tmp_path)
    try:
        sim = Simbank(procs, "simbank")
        sim.faults(**FAULTS, seed=11)
        idem = Idempay(procs, sim, database_url=url)
        idem.start_serve()
        plan = payments(N, seed=11)
        run = Run()
        killer = asyncio.create_task(idem.kill_serve_midway(run, N))
        policy = RetryPolicy(client_retries=2, gateway_retries=1, timeout_s=2.0)
        await drive(plan, idempay_sender(idem.url, idem.api_key, policy.timeout_s), policy, 16, run)
        await killer
        sends = sum(o.sends for o in run.outcomes)
        assert sends > N  # the clients did retry, with the same biz_no
        sim.faults(seed=11)  # healed
        idem.start_worker()
        assert await idem.wait_settled(90), "payments still open after the worker ran"
        books = await idem.payments()
        ledger = sim.ledger()
    finally:
        procs.stop_all()
    charged = charges_by_ref(ledger)
    assert all(len(c) <= 1 for c in charged.values()), "a payment was charged twice"
    assert {p["status"] for p in books} <= {"SUCCESS", "FAILED"}
    wrong = [p["biz_no"] for p in books if (p["status"] == "SUCCESS") != bool(charged.get(p["id"]))]
    assert wrong == [], f"idempay disagrees with the bank on {wrong[:5]}"
    assert len(books) >= N * 0.9  # almost every payment reached idempay despite the crash
    assert set(charged) <= {p["id"] for p in books}  # the bank charged nothing idempay lost
