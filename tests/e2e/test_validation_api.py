"""Bad input through real HTTP: always a 4xx problem document, never a 5xx, and nothing written —
no payment, no idempotency record, no channel execution."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.expect import pay, problem, snapshot
from tests.e2e.server import Principal, Server

JSON = {"Content-Type": "application/json"}
MAX_AMOUNT = 100_000_000_000
VALID = b'{"biz_no": "P1", "order_no": "O1", "amount": 19900, "currency": "CNY", "channel": "fast"}'


@pytest.mark.parametrize(
    "changes",
    [
        {"amount": 1.0},
        {"amount": 199.5},
        {"amount": "100"},
        {"amount": True},
        {"amount": None},
        {"amount": 0},
        {"amount": -5},
        {"amount": MAX_AMOUNT + 1},
        {"amount": 2**63},
        {"amount": 2**70},
        {"currency": "XXX"},
        {"currency": "cny"},
        {"currency": ""},
        {"currency": 156},
        {"biz_no": "x" * 65},
        {"biz_no": "has space"},
        {"biz_no": "ünï"},
        {"biz_no": ""},
        {"biz_no": "a/b"},
        {"biz_no": "a\n"},
        {"order_no": "x" * 65},
        {"order_no": "semi;colon"},
        {"channel": "nope"},
        {"channel": ""},
        {"status": "SUCCESS"},
        {"merchant_id": "mch_other"},
        {"id": "pay_mine"},
        {"attempt": 2},
        {"refunded_amount": 0},
        {"description": "nul\x00byte"},
        {"description": "x" * 257},
        {"notify_url": "ftp://example.invalid/x"},
        {"notify_url": 42},
    ],
    ids=lambda c: "-".join(f"{k}={str(v)[:12]!r}" for k, v in c.items()),
)
async def test_an_invalid_field_is_400_invalid_request_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server, changes: dict[str, Any]
) -> None:
    before = await snapshot(server, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "k-validation"}
    r = await client.post("/v1/payments", json=pay(**changes), headers=headers)
    doc = problem(r, 400, "INVALID_REQUEST")
    assert doc.get("errors"), doc
    assert await snapshot(server, merchant) == before
    listed = await client.get("/v1/payments", headers=merchant.auth)
    assert listed.json() == {"items": [], "next_cursor": None}


@pytest.mark.parametrize("missing", ["biz_no", "order_no", "amount", "currency", "channel"])
async def test_a_missing_required_field_is_400(
    client: httpx.AsyncClient, merchant: Principal, server: Server, missing: str
) -> None:
    body = pay()
    del body[missing]
    before = await snapshot(server, merchant)
    doc = problem(
        await client.post("/v1/payments", json=body, headers=merchant.auth), 400, "INVALID_REQUEST"
    )
    assert [e["field"] for e in doc["errors"]] == [missing]
    assert await snapshot(server, merchant) == before


@pytest.mark.parametrize(
    "raw",
    [
        VALID.replace(b"19900", b"1e2"),
        VALID.replace(b"19900", b"100.0"),
        VALID.replace(b"19900", b"NaN"),
        VALID.replace(b"19900", b"Infinity"),
        VALID.replace(b"19900", b"1" + b"0" * 5000),
        VALID.replace(b'"fast"', b'"fast", "description": "\\ud800"'),
        b'{"biz_no": "P1",',
        b"",
        b"   ",
        b"[]",
        b'"text"',
        b"null",
        b"\xff\xfe{}",
        b"[" * 20000,
    ],
    ids=[
        "exponent",
        "fraction",
        "nan",
        "infinity",
        "huge-literal",
        "lone-surrogate",
        "truncated",
        "empty",
        "blank",
        "array",
        "string",
        "null",
        "not-utf8",
        "deep-nesting",
    ],
)
async def test_malformed_or_non_object_json_is_400_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server, raw: bytes
) -> None:
    before = await snapshot(server, merchant)
    r = await client.post("/v1/payments", content=raw, headers={**merchant.auth, **JSON})
    problem(r, 400, "INVALID_REQUEST")
    assert await snapshot(server, merchant) == before


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
async def test_a_body_that_is_not_application_json_is_415(
    client: httpx.AsyncClient, merchant: Principal, server: Server, content_type: str | None
) -> None:
    before = await snapshot(server, merchant)
    headers = {**merchant.auth, **({"Content-Type": content_type} if content_type else {})}
    r = await client.post(
        "/v1/payments", content=httpx.Response(200, json=pay()).content, headers=headers
    )
    problem(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await snapshot(server, merchant) == before


async def test_application_json_with_a_charset_is_accepted(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    r = await client.post(
        "/v1/payments",
        content=httpx.Response(200, json=pay()).content,
        headers={**merchant.auth, "Content-Type": "application/json; charset=utf-8"},
    )
    assert r.status_code == 201, r.text


async def test_a_body_over_64_kib_is_413_by_its_declared_length(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    before = await snapshot(server, merchant)
    big = pay(description="x" * (64 * 1024))
    problem(
        await client.post("/v1/payments", json=big, headers=merchant.auth), 413, "PAYLOAD_TOO_LARGE"
    )
    assert await snapshot(server, merchant) == before


async def test_a_streamed_body_over_64_kib_without_a_length_is_413(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    async def chunks() -> Any:
        yield b'{"biz_no": "P1", "description": "'
        for _ in range(80):
            yield b"x" * 1024
        yield b'"}'

    before = await snapshot(server, merchant)
    r = await client.post("/v1/payments", content=chunks(), headers={**merchant.auth, **JSON})
    assert "content-length" not in r.request.headers  # sent chunked
    problem(r, 413, "PAYLOAD_TOO_LARGE")
    assert await snapshot(server, merchant) == before


async def test_a_body_of_exactly_64_kib_is_read(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    body = httpx.Response(200, json=pay()).content
    padded = body[:-1] + b" " * (64 * 1024 - len(body)) + b"}"
    r = await client.post("/v1/payments", content=padded, headers={**merchant.auth, **JSON})
    assert len(padded) == 64 * 1024 and r.status_code == 201, r.text


@pytest.mark.parametrize(
    "key", ["x" * 65, "has space", "ünï", ""], ids=["too-long", "space", "non-ascii", "empty"]
)
async def test_an_illegal_idempotency_key_is_400_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server, key: str
) -> None:
    before = await snapshot(server, merchant)
    headers = [*merchant.auth.items(), ("Idempotency-Key", key.encode())]
    r = await client.post("/v1/payments", json=pay(), headers=headers)
    problem(r, 400, "INVALID_REQUEST")
    assert await snapshot(server, merchant) == before


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=101",
        "limit=abc",
        "limit=1.5",
        "limit=",
        "status=PAID",
        "status=success",
        "cursor=not-a-cursor",
        "cursor=cDE6Li4v",
        "order_no=bad%20id",
    ],
)
async def test_bad_list_parameters_are_400(
    client: httpx.AsyncClient, merchant: Principal, query: str
) -> None:
    problem(
        await client.get(f"/v1/payments?{query}", headers=merchant.auth), 400, "INVALID_REQUEST"
    )


@pytest.mark.parametrize("biz_no", ["x" * 65, "has%20space", "%C3%BC"])
async def test_an_illegal_biz_no_in_the_path_is_400(
    client: httpx.AsyncClient, merchant: Principal, biz_no: str
) -> None:
    for method, path in (("GET", ""), ("POST", "/retry"), ("POST", "/close")):
        r = await client.request(method, f"/v1/payments/{biz_no}{path}", headers=merchant.auth)
        problem(r, 400, "INVALID_REQUEST")


@pytest.mark.parametrize(
    "body",
    [{"amount": 1.5}, {"amount": 0}, {"amount": "5"}, {"status": "INIT"}, []],
    ids=["float", "zero", "string", "mass-assignment", "array"],
)
async def test_a_bad_retry_body_is_400_and_changes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server, body: Any
) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    before = await snapshot(server, merchant)
    r = await client.post("/v1/payments/PAY_ORD001/retry", json=body, headers=merchant.auth)
    problem(r, 400, "INVALID_REQUEST")
    assert await snapshot(server, merchant) == before
    got = (await client.get("/v1/payments/PAY_ORD001", headers=merchant.auth)).json()
    assert (got["status"], got["attempt"]) == ("FAILED", 1)


async def test_close_accepts_no_field(client: httpx.AsyncClient, merchant: Principal) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    r = await client.post(
        "/v1/payments/PAY_ORD001/close", json={"status": "CLOSED"}, headers=merchant.auth
    )
    problem(r, 400, "INVALID_REQUEST")
    got = (await client.get("/v1/payments/PAY_ORD001", headers=merchant.auth)).json()
    assert got["status"] == "FAILED"
