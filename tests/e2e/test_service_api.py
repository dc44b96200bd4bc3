"""What every client and operator relies on besides payments: X-Request-Id on every response,
problem documents for unknown routes, /healthz, /metrics, /openapi.json."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter

from idempay import bootstrap
from idempay.api.app import create_app
from idempay.config import Settings
from tests import dbs
from tests.e2e.expect import pay, problem
from tests.e2e.server import Principal, Server


async def test_every_response_carries_a_request_id_and_a_valid_one_is_echoed(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    mine = await client.get("/v1/payments", headers={**merchant.auth, "X-Request-Id": "trace-42"})
    assert mine.headers["x-request-id"] == "trace-42"
    bad = await client.get("/healthz", headers={"X-Request-Id": "no spaces allowed"})
    assert re.fullmatch(r"[0-9a-f]{32}", bad.headers["x-request-id"])
    for r in (
        await client.get("/healthz"),
        await client.get("/v1/payments"),
        await client.post("/v1/payments", content=b"{", headers=merchant.auth),
    ):
        assert r.headers["x-request-id"]


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/nope"), ("POST", "/v1/payment"), ("GET", "/v1/payments/a/b/c")]
)
async def test_an_unknown_route_is_a_404_problem_document(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    problem(await client.request(method, path), 404, "NOT_FOUND")


async def test_a_wrong_method_is_a_405_problem_document_with_allow(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    r = await client.delete("/v1/payments/PAY_ORD001", headers=merchant.auth)
    problem(r, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in r.headers["allow"]


async def test_healthz_answers_200_without_a_key(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


async def test_metrics_count_requests_by_route_template_payments_and_duplicates(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await client.post("/v1/payments", json=pay("M1"), headers=merchant.auth)
    await client.post("/v1/payments", json=pay("M1"), headers=merchant.auth)
    await client.get("/v1/payments/M1", headers=merchant.auth)
    text = (await client.get("/metrics")).text
    assert re.search(
        r'idempay_http_requests_total\{method="GET",route="/v1/payments/\{biz_no\}",'
        r'status="200"\} [1-9]',
        text,
    )
    assert "/v1/payments/M1" not in text  # templates, not raw paths
    assert re.search(r'idempay_payments_total\{status="SUCCESS"\} [1-9]', text)
    assert re.search(r'idempay_duplicates_stopped_total\{layer="biz_no"\} [1-9]', text)
    assert re.search(r'idempay_channel_calls_total\{channel="fast",outcome="SUCCESS"\} [1-9]', text)
    assert "idempay_http_request_duration_seconds_bucket" in text
    assert "idempay_charge_duration_seconds_bucket" in text


async def test_openapi_documents_every_endpoint_and_bearer_auth(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    assert {
        "/v1/payments",
        "/v1/payments/{biz_no}",
        "/v1/payments/{biz_no}/retry",
        "/v1/payments/{biz_no}/close",
        "/v1/ops/payments/{payment_id}",
        "/healthz",
        "/metrics",
    } <= set(doc["paths"])
    create = doc["paths"]["/v1/payments"]["post"]
    assert {"201", "200", "202", "400", "401", "409", "413", "415", "422"} <= set(
        create["responses"]
    )
    assert doc["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    charge = doc["components"]["schemas"]["ChargeRequest"]
    assert charge["additionalProperties"] is False
    assert charge["properties"]["amount"]["maximum"] == 100_000_000_000
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_healthz_is_503_when_the_database_is_gone(tmp_path: Path) -> None:
    url, name = dbs.create("postgresql", tmp_path)
    srv = Server(url, tmp_path, channels={"fast": {"kind": "scripted"}}).start()
    try:
        dbs.drop("postgresql", name)  # terminates the server's connections, then drops it
        r = httpx.get(f"{srv.url}/healthz", timeout=10)
        problem(r, 503, "UNAVAILABLE")
    finally:
        srv.stop()
        dbs.drop("postgresql", name)


async def test_an_unhandled_error_is_a_500_problem_with_a_request_id(tmp_path: Path) -> None:
    """In process: a router added through create_app(routers=...) that fails unexpectedly."""
    broken = APIRouter()

    @broken.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a defect")

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}")
    container = await bootstrap.build(settings, channels={})
    try:
        transport = httpx.ASGITransport(app=create_app(container, routers=[broken]))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            r = await c.get("/boom", headers={"X-Request-Id": "rid-1"})
    finally:
        await container.aclose()
    doc = problem(r, 500, "INTERNAL")
    assert r.headers["x-request-id"] == doc["request_id"] == "rid-1"
    assert "defect" not in doc["detail"]  # internals are logged, not answered
