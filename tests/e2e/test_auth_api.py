"""Authentication and scoping through real HTTP: 401 without a known key, 403 for the wrong kind
of key, and another merchant's objects are 404 — never 403, never visible."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.expect import pay, problem, resource, snapshot
from tests.e2e.server import Principal, Server

ENDPOINTS = [
    ("POST", "/v1/payments"),
    ("GET", "/v1/payments"),
    ("GET", "/v1/payments/PAY_ORD001"),
    ("POST", "/v1/payments/PAY_ORD001/retry"),
    ("POST", "/v1/payments/PAY_ORD001/close"),
    ("GET", "/v1/ops/payments/pay_x"),
]


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Token abc", "Bearer sk_not_a_key", "Basic dXNlcjpwYXNz", "sk_no_scheme"],
)
async def test_a_missing_or_unknown_key_is_401_on_every_endpoint_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    before = await snapshot(server, merchant)
    for method, path in ENDPOINTS:
        r = await client.request(method, path, json=pay(), headers=headers)
        problem(r, 401, "UNAUTHENTICATED")
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert await snapshot(server, merchant) == before


async def test_a_key_is_checked_exactly_not_by_prefix_or_case(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    for wrong in (merchant.key[:-1], merchant.key + "x", merchant.key.upper()):
        r = await client.get("/v1/payments", headers={"Authorization": f"Bearer {wrong}"})
        problem(r, 401, "UNAUTHENTICATED")
    ok = await client.get("/v1/payments", headers={"Authorization": f"bearer {merchant.key}"})
    assert ok.status_code == 200  # the scheme name is case-insensitive (RFC 9110)


async def test_a_merchant_key_on_an_operator_endpoint_is_403(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    created = (await client.post("/v1/payments", json=pay(), headers=merchant.auth)).json()
    r = await client.get(f"/v1/ops/payments/{created['id']}", headers=merchant.auth)
    problem(r, 403, "FORBIDDEN")


async def test_an_operator_key_on_merchant_endpoints_is_403_and_writes_nothing(
    client: httpx.AsyncClient, operator: Principal, merchant: Principal, server: Server
) -> None:
    before = await snapshot(server, merchant)
    for method, path in ENDPOINTS[:-1]:
        r = await client.request(method, path, json=pay(), headers=operator.auth)
        problem(r, 403, "FORBIDDEN")
    assert await snapshot(server, merchant) == before


async def test_another_merchants_payment_is_404_everywhere_and_untouched(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal, server: Server
) -> None:
    mine = await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    for method, path in ENDPOINTS[2:5]:
        r = await client.request(method, path, headers=other_merchant.auth)
        problem(r, 404, "NOT_FOUND")
    listed = await client.get("/v1/payments", headers=other_merchant.auth)
    assert listed.json() == {"items": [], "next_cursor": None}
    still = await client.get("/v1/payments/PAY_ORD001", headers=merchant.auth)
    assert resource(still, 200) == mine.json()  # FAILED, attempt 1: neither retried nor closed


async def test_the_same_biz_no_under_two_merchants_is_two_payments(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal, server: Server
) -> None:
    a = resource(await client.post("/v1/payments", json=pay(), headers=merchant.auth), 201)
    b = resource(await client.post("/v1/payments", json=pay(), headers=other_merchant.auth), 201)
    assert a["id"] != b["id"]
    assert len(server.executions(a["id"])) == len(server.executions(b["id"])) == 1


async def test_a_cursor_from_another_merchant_shows_nothing_of_theirs(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal
) -> None:
    for n in range(2):
        await client.post("/v1/payments", json=pay(f"P{n}"), headers=merchant.auth)
    page = (await client.get("/v1/payments?limit=1", headers=merchant.auth)).json()
    r = await client.get(
        "/v1/payments", params={"cursor": page["next_cursor"]}, headers=other_merchant.auth
    )
    assert r.json() == {"items": [], "next_cursor": None}
