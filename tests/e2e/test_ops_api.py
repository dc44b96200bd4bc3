"""Operator endpoints through real HTTP: any merchant's payment by id, with its history."""

from __future__ import annotations

import httpx

from tests.e2e.expect import pay, problem
from tests.e2e.server import Principal


async def test_an_operator_sees_any_merchants_payment_with_both_transition_logs(
    client: httpx.AsyncClient, merchant: Principal, operator: Principal
) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    retried = (await client.post("/v1/payments/PAY_ORD001/retry", headers=merchant.auth)).json()
    r = await client.get(f"/v1/ops/payments/{retried['id']}", headers=operator.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["merchant_id"], body["biz_no"], body["attempt"]) == (merchant.id, "PAY_ORD001", 2)
    assert [(t["from"], t["to"]) for t in body["transitions"]] == [
        (None, "PROCESSING"),
        ("PROCESSING", "FAILED"),
        ("FAILED", "INIT"),
        ("INIT", "PROCESSING"),
        ("PROCESSING", "FAILED"),
    ]
    first, second = body["instructions"]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    first_log = [(t["from"], t["to"]) for t in first["transitions"]]
    assert first_log == [(None, "PENDING"), ("PENDING", "FAILED")]
    assert first["last_error"] and first["transitions"][0]["actor"] == f"merchant:{merchant.id}"


async def test_an_unknown_payment_id_is_404_for_an_operator(
    client: httpx.AsyncClient, operator: Principal
) -> None:
    r = await client.get("/v1/ops/payments/pay_000000000000", headers=operator.auth)
    problem(r, 404, "NOT_FOUND")
