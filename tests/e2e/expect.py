"""Assertions shared by the end-to-end tests: problem documents, resources, "nothing written"."""

from __future__ import annotations

import re
from typing import Any

import httpx

from idempay.storage import tables as t
from tests.e2e.server import Principal, Server

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
PAYMENT_FIELDS = {
    "id",
    "biz_no",
    "order_no",
    "amount",
    "currency",
    "channel",
    "status",
    "attempt",
    "refunded_amount",
    "split_amount",
    "instructions",
    "created_at",
    "updated_at",
}


def pay(biz_no: str = "PAY_ORD001", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "biz_no": biz_no,
        "order_no": "ORD001",
        "amount": 19900,
        "currency": "CNY",
        "channel": "fast",
    }
    body.update(changes)
    return body


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """`response` is an RFC 9457 problem document with `status` and `code`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = response.json()
    assert doc["status"] == status and doc["code"] == code, doc
    assert {"type", "title", "detail"} <= set(doc)
    assert response.headers["x-request-id"]
    return doc


def resource(response: httpx.Response, status: int, *, replayed: bool = False) -> dict[str, Any]:
    """`response` is a payment resource as API.md shows it."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers.get("idempotent-replayed") == ("true" if replayed else None)
    assert response.headers["x-request-id"]
    body: dict[str, Any] = response.json()
    assert set(body) >= PAYMENT_FIELDS, body
    assert RFC3339_UTC.fullmatch(body["created_at"]) and RFC3339_UTC.fullmatch(body["updated_at"])
    for instruction in body["instructions"]:
        assert {"request_id", "status", "query_count"} <= set(instruction)
    return body


async def snapshot(server: Server, merchant: Principal) -> tuple[int, ...]:
    """What `merchant` has written (payments, idempotency records, outbox events) and how often
    the channels executed: equal before and after a rejected request."""
    counts = await server.db.counts(merchant.id, t.payments, t.idempotency_keys, t.outbox)
    return (*counts, len(server.executions()))


REFUND_FIELDS = {
    "id",
    "refund_no",
    "biz_no",
    "amount",
    "currency",
    "status",
    "reason",
    "instructions",
    "created_at",
    "updated_at",
}
SPLIT_FIELDS = {
    "id",
    "split_no",
    "biz_no",
    "amount",
    "currency",
    "status",
    "items",
    "created_at",
    "updated_at",
}


def _answer(
    response: httpx.Response, status: int, fields: set[str], *, replayed: bool
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers.get("idempotent-replayed") == ("true" if replayed else None)
    assert response.headers["x-request-id"]
    body: dict[str, Any] = response.json()
    assert set(body) == fields, body
    assert RFC3339_UTC.fullmatch(body["created_at"]) and RFC3339_UTC.fullmatch(body["updated_at"])
    return body


def refund_answer(
    response: httpx.Response, status: int, *, replayed: bool = False
) -> dict[str, Any]:
    """`response` is a refund resource: exactly the fields of the refund JSON."""
    body = _answer(response, status, REFUND_FIELDS, replayed=replayed)
    for instruction in body["instructions"]:
        assert set(instruction) == {"request_id", "status", "query_count"}
    return body


def split_answer(
    response: httpx.Response, status: int, *, replayed: bool = False
) -> dict[str, Any]:
    """`response` is a split resource: exactly the fields of the split JSON."""
    body = _answer(response, status, SPLIT_FIELDS, replayed=replayed)
    for item in body["items"]:
        assert set(item) == {"receiver_id", "amount", "status", "request_id"}
    return body


async def money_snapshot(server: Server, merchant: Principal) -> tuple[object, ...]:
    """`snapshot` plus the merchant's refunds, splits, split items, instructions and every
    payment's balances (refunded, split, reserved): equal before and after a rejected refund or
    split."""
    tables = (t.refunds, t.splits, t.split_items, t.instructions)
    counts = await server.db.counts(merchant.id, *tables)
    balances = await server.db.balances(merchant.id)
    return (*await snapshot(server, merchant), *counts, *balances)
