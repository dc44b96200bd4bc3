"""Settlement over HTTP with real processes: signed callbacks (forged ones refused, duplicates
applied once), the review queue worked by an operator, reconciliation on demand."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from idempay.demo.procs import SIM_SECRET, Idempay, Procs, Simbank
from idempay.simbank import signing
from idempay.storage import tables as t
from idempay.storage.engine import create_engine


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    yield p
    p.stop_all()


def operator_key(idem: Idempay) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "idempay.cli", "operator", "create", "ops"],
        env={**os.environ, **idem.env},
        capture_output=True,
        check=True,
        text=True,
    )
    return str(json.loads(out.stdout)["api_key"])


def pay(idem: Idempay, biz_no: str = "PAY_1", amount: int = 19900) -> httpx.Response:
    body = {
        "biz_no": biz_no,
        "order_no": "O1",
        "amount": amount,
        "currency": "CNY",
        "channel": "simbank",
    }
    return httpx.post(
        f"{idem.url}/v1/payments",
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {idem.api_key}"},
    )


def get(idem: Idempay, path: str, key: str | None = None) -> httpx.Response:
    return httpx.get(
        f"{idem.url}{path}", headers={"Authorization": f"Bearer {key or idem.api_key}"}, timeout=30
    )


def callback(
    idem: Idempay,
    payload: dict[str, Any],
    *,
    secret: str = SIM_SECRET,
    shift_s: int = 0,
    tamper: bool = False,
) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = signing.signed_headers(secret, body, int(time.time()) + shift_s)
    if tamper:
        body = body.replace(b"19900", b"19901")
    return httpx.post(
        f"{idem.url}/v1/channels/simbank/notify", content=body, headers=headers, timeout=30
    )


async def count(url: str, table: t.Table, **where: object) -> int:
    engine = create_engine(url)
    q = select(func.count()).select_from(table).where(*(table.c[k] == v for k, v in where.items()))
    async with engine.connect() as conn:
        n = int((await conn.execute(q)).scalar_one())
    await engine.dispose()
    return n


async def test_signed_callbacks_apply_once_and_forged_ones_are_refused(procs: Procs) -> None:
    sim = Simbank(procs, "simbank")
    sim.faults(async_rate=1, async_settle_ms=120_000)  # the bank settles long after this test
    idem = Idempay(procs, sim)
    idem.start_serve()
    created = pay(idem).json()
    assert created["status"] == "PROCESSING"
    rid = created["instructions"][0]["request_id"]
    note = {
        "notify_id": "n-1",
        "request_id": rid,
        "kind": "PAY",
        "payment_ref": created["id"],
        "receiver_id": None,
        "amount": 19900,
        "currency": "CNY",
        "status": "SUCCESS",
        "reason": None,
        "channel_txn_id": "sbt_x",
        "executed_at": datetime.now(UTC).isoformat(),
        "timestamp": int(time.time()),
    }
    for forged in (
        callback(idem, note, secret="wrong"),
        callback(idem, note, tamper=True),
        callback(idem, note, shift_s=-360),
        callback(idem, note, shift_s=+360),
    ):
        assert forged.status_code == 401
        assert forged.json()["code"] in ("UNAUTHENTICATED", "INVALID_SIGNATURE")
    assert get(idem, "/v1/payments/PAY_1").json()["status"] == "PROCESSING"
    other = callback(idem, {**note, "notify_id": "n-amount", "amount": 1})
    assert other.status_code == 200  # acknowledged, so the bank stops resending...
    assert get(idem, "/v1/payments/PAY_1").json()["status"] == "PROCESSING"  # ...not applied
    assert await count(idem.database_url, t.discrepancies, **{"class": "AMOUNT_MISMATCH"}) == 1

    async with httpx.AsyncClient(timeout=30) as client:
        body = json.dumps(note).encode()
        headers = signing.signed_headers(SIM_SECRET, body, int(time.time()))
        answers = await asyncio.gather(
            *(
                client.post(f"{idem.url}/v1/channels/simbank/notify", content=body, headers=headers)
                for _ in range(20)
            )
        )
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["code"] for a in answers} == {"SUCCESS"}
    assert get(idem, "/v1/payments/PAY_1").json()["status"] == "SUCCESS"
    assert await count(idem.database_url, t.transitions, entity_id=rid, to_status="SUCCESS") == 1
    assert await count(idem.database_url, t.outbox, kind="payment.success") == 1
    metrics = httpx.get(f"{idem.url}/metrics", timeout=10).text
    assert 'idempay_callbacks_total{channel="simbank",result="DUPLICATE"} 19.0' in metrics
    assert 'idempay_callbacks_total{channel="simbank",result="REJECTED"} 4.0' in metrics


async def test_an_operator_works_the_review_queue(procs: Procs) -> None:
    sim = Simbank(procs, "simbank")
    sim.faults(drop_response_rate=1, callback_loss_rate=1)  # charged; nobody will say so
    idem = Idempay(procs, sim, IDEMPAY_MAX_QUERIES="1")
    idem.start_serve()
    assert pay(idem).json()["status"] == "UNKNOWN"
    gauges = httpx.get(f"{idem.url}/metrics", timeout=10).text
    assert 'idempay_unresolved_instructions{age="1m",status="UNKNOWN"} 1.0' in gauges
    assert "idempay_webhooks_pending 1.0" in gauges  # payment.unknown, until the worker runs
    procs.kill(sim.process)  # the bank stops answering: the worker cannot find the outcome
    idem.start_worker()
    ops = operator_key(idem)
    deadline = time.monotonic() + 30
    while (
        not (items := get(idem, "/v1/ops/reviews", ops).json()["items"])
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(0.2)
    [review] = items
    assert review["kind"] == "UNRESOLVED" and review["status"] == "OPEN"
    assert get(idem, "/v1/ops/reviews").status_code == 403  # a merchant key
    resolve = f"{idem.url}/v1/ops/reviews/{review['id']}/resolve"
    body = {"outcome": "SUCCESS", "note": "bank portal shows txn 42"}
    done = httpx.post(resolve, json=body, headers={"Authorization": f"Bearer {ops}"}, timeout=30)
    assert done.status_code == 200 and done.json()["status"] == "RESOLVED"
    payment = get(idem, "/v1/payments/PAY_1").json()
    assert payment["status"] == "SUCCESS"
    log = get(idem, f"/v1/ops/payments/{payment['id']}", ops).json()["transitions"]
    assert log[-1]["actor"].startswith("operator:") and "txn 42" in log[-1]["reason"]
    metrics = httpx.get(f"{idem.url}/metrics", timeout=10).text
    assert (
        "idempay_reviews_open" in metrics
        and 'idempay_resolutions_total{source="operator"} 1.0' in metrics
    )
    assert 'idempay_unresolved_instructions{age="1m",status="UNKNOWN"}' not in metrics  # settled
    again = httpx.post(resolve, json=body, headers={"Authorization": f"Bearer {ops}"}, timeout=30)
    assert again.status_code == 409 and again.json()["code"] == "INVALID_STATE"
    assert get(idem, "/v1/ops/reviews", ops).json()["items"] == []


def test_reconciliation_runs_on_demand_and_again_without_repeating(procs: Procs) -> None:
    sim = Simbank(procs, "simbank")
    idem = Idempay(procs, sim)
    idem.start_serve()
    assert pay(idem).json()["status"] == "SUCCESS"
    ops = {"Authorization": f"Bearer {operator_key(idem)}"}
    url = f"{idem.url}/v1/ops/reconciliations"
    today = datetime.now(UTC).date().isoformat()
    first = httpx.post(url, json={"channel": "simbank", "date": today}, headers=ops, timeout=60)
    assert first.status_code == 201, first.text
    run = first.json()
    assert (run["status"], run["counts"]["MATCH"], run["discrepancies"]) == ("DONE", 1, [])
    again = httpx.post(url, json={"channel": "simbank", "date": today}, headers=ops, timeout=60)
    assert again.status_code == 201 and again.json()["counts"] == run["counts"]
    assert again.json()["id"] != run["id"]
    assert httpx.get(f"{url}/{run['id']}", headers=ops, timeout=30).json() == run
    for bad in (
        {"channel": "simbank", "date": "2026-13-01"},
        {"channel": "nope", "date": today},
        {"channel": "simbank"},
        {"channel": "simbank", "date": today, "x": 1},
    ):
        answer = httpx.post(url, json=bad, headers=ops, timeout=30)
        assert answer.status_code == 400 and answer.json()["code"] == "INVALID_REQUEST", bad
    merchant = {"Authorization": f"Bearer {idem.api_key}"}
    assert (
        httpx.post(url, json={"channel": "simbank", "date": today}, headers=merchant).status_code
        == 403
    )


def test_a_bank_that_charged_twice_is_found_and_refunded_once(procs: Procs) -> None:
    sim = Simbank(procs, "simbank")
    sim.faults(idempotency=False)  # the bank's own idempotency has failed (seeds/002)
    idem = Idempay(procs, sim)
    idem.start_serve()
    paid = pay(idem).json()
    assert paid["status"] == "SUCCESS"
    replay = {
        "request_id": paid["instructions"][0]["request_id"],
        "payment_ref": paid["id"],
        "amount": 19900,
        "currency": "CNY",
    }
    assert httpx.post(f"{sim.url}/bank/pay", json=replay, timeout=10).status_code == 200
    assert len([e for e in sim.ledger() if e["kind"] == "PAY"]) == 2  # charged twice
    ops = {"Authorization": f"Bearer {operator_key(idem)}"}
    url = f"{idem.url}/v1/ops/reconciliations"
    today = datetime.now(UTC).date().isoformat()
    first = httpx.post(
        url, json={"channel": "simbank", "date": today}, headers=ops, timeout=60
    ).json()
    [dup] = [d for d in first["discrepancies"] if d["class"] == "DUPLICATE_CHARGE"]
    assert dup["correction"].startswith("refund dup-") and dup["correction"].endswith("SUCCESS")
    refunds = [e for e in sim.ledger() if e["kind"] == "REFUND"]
    assert [(r["amount"], r["status"], r["payment_ref"]) for r in refunds] == [
        (19900, "SUCCESS", paid["id"])
    ]
    second = httpx.post(
        url, json={"channel": "simbank", "date": today}, headers=ops, timeout=60
    ).json()
    assert [d for d in second["discrepancies"] if d["class"] == "DUPLICATE_CHARGE"] == [dup]
    assert len([e for e in sim.ledger() if e["kind"] == "REFUND"]) == 1  # never twice
    assert get(idem, "/v1/payments/PAY_1").json()["refunded_amount"] == 0  # not the payment's money
