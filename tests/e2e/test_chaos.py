"""The chaos test: a real simulator with faults (half-open, timeouts, 5xx, lost callbacks, a channel
whose idempotency failed), `idempay serve` killed with SIGKILL mid-run and restarted, clients
retrying with the same biz_no; then the faults heal and `idempay worker` runs. The simulator's
ledger is the truth: at most one charge per payment, and idempay agrees with it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idempay.demo.procs import Idempay, Procs, Simbank
from idempay.demo.report import charges_by_ref
from idempay.demo.workload import Payment, RetryPolicy, Run, Send, drive, idempay_sender, payments
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


def money_sender(base_url: str, api_key: str, timeout_s: float) -> Send:
    """Per paid payment: a 30% refund and a 3:4 split of 70% (everything there is), each retried
    with the same refund_no / split_no, plus one refund too many that must be refused."""
    headers = {"Authorization": f"Bearer {api_key}"}

    async def send(client: httpx.AsyncClient, p: Payment, _n: int) -> str | None:
        refund = {"refund_no": f"RF_{p.biz_no}", "biz_no": p.biz_no, "amount": p.amount * 3 // 10}
        rest = p.amount - refund["amount"]
        split = {
            "split_no": f"SP_{p.biz_no}",
            "biz_no": p.biz_no,
            "receivers": [
                {"receiver_id": "distributor-7", "amount": rest * 3 // 7},
                {"receiver_id": "platform", "amount": rest - rest * 3 // 7},
            ],
        }
        extra = {"refund_no": f"RX_{p.biz_no}", "biz_no": p.biz_no, "amount": 1}
        try:
            answers = [
                await client.post(
                    f"{base_url}/v1/refunds", json=refund, headers=headers, timeout=timeout_s
                ),
                await client.post(
                    f"{base_url}/v1/splits", json=split, headers=headers, timeout=timeout_s
                ),
                await client.post(
                    f"{base_url}/v1/refunds", json=extra, headers=headers, timeout=timeout_s
                ),
            ]
        except httpx.HTTPError:
            return None
        if any(a.status_code >= 500 for a in answers):
            return None
        return ",".join(str(a.status_code) for a in answers)

    return send


async def test_refunds_and_splits_under_faults_never_move_more_than_was_charged(
    postgres_url: str, tmp_path: Path
) -> None:
    procs = Procs(tmp_path)
    try:
        sim = Simbank(procs, "simbank")
        idem = Idempay(procs, sim, database_url=postgres_url)
        idem.start_serve()
        plan = payments(60, seed=5)
        policy = RetryPolicy(client_retries=2, gateway_retries=1, timeout_s=2.0)
        await drive(plan, idempay_sender(idem.url, idem.api_key, 5.0), policy, 16, Run())
        sim.faults(**FAULTS, seed=5)  # now the money that leaves meets the faults
        run = Run()
        await drive(plan, money_sender(idem.url, idem.api_key, policy.timeout_s), policy, 16, run)
        sim.faults(seed=5)
        idem.start_worker()
        assert await idem.wait_settled(90)
        deadline = asyncio.get_running_loop().time() + 90
        headers = {"Authorization": f"Bearer {idem.api_key}"}
        async with httpx.AsyncClient(base_url=idem.url, headers=headers, timeout=30) as client:
            while True:
                refunds = [(await client.get(f"/v1/refunds/RF_{p.biz_no}")).json() for p in plan]
                splits = [(await client.get(f"/v1/splits/SP_{p.biz_no}")).json() for p in plan]
                open_ = [r for r in refunds if r.get("status") in ("PROCESSING", "UNKNOWN")]
                open_ += [s for s in splits if s.get("status") in ("PENDING", "PROCESSING")]
                if not open_ or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.5)
            books = await idem.payments()
        ledger = sim.ledger()
    finally:
        procs.stop_all()
    assert not open_, f"still open: {open_[:3]}"
    ok = [e for e in ledger if e["status"] == "SUCCESS"]
    for p in books:
        charged = sum(e["amount"] for e in ok if e["payment_ref"] == p["id"] and e["kind"] == "PAY")
        out = sum(e["amount"] for e in ok if e["payment_ref"] == p["id"] and e["kind"] != "PAY")
        assert out <= charged, f"{p['biz_no']}: {out} left for {charged} charged"
    succeeded = {e["request_id"] for e in ok}
    for r in refunds:
        if "status" in r:
            assert (r["status"] == "SUCCESS") == bool(
                {i["request_id"] for i in r["instructions"]} & succeeded
            )
    for s in splits:
        for item in s.get("items", []):
            assert (item["status"] == "SUCCESS") == (item["request_id"] in succeeded), item
    assert sum(1 for r in refunds if r.get("status") == "SUCCESS") > 0
