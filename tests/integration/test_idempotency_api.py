"""The Idempotency-Key lifecycle through the ASGI app on a manual clock, on every database: the
TTL, and a key whose request died after its transaction committed (crash recovery)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from idempay import bootstrap
from idempay.api.app import create_app
from idempay.api.idempotency import fingerprint
from idempay.bootstrap import Container
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.services.idempotency import KeyedRequest
from idempay.services.payments import ChargeCommand

TTL_S = 600
IN_FLIGHT_S = 2.0 + bootstrap.IN_FLIGHT_MARGIN_S
BODY = {
    "biz_no": "PAY_1",
    "order_no": "ORD1",
    "amount": 100,
    "currency": "CNY",
    "channel": "scripted",
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def container(
    database_url: str, channel: ScriptedChannel, clock: ManualClock
) -> AsyncIterator[Container]:
    settings = Settings(database_url=database_url, channel_timeout_s=2.0, idempotency_ttl_s=TTL_S)
    c = await bootstrap.build(settings, channels={"scripted": channel}, clock=clock)
    yield c
    await c.aclose()


@pytest.fixture
async def key(container: Container) -> str:
    _, api_key = await bootstrap.create_principal(container.store, "acme", operator=False)
    return api_key


@pytest.fixture
async def api(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(container))
    async with httpx.AsyncClient(transport=transport, base_url="http://idempay.test") as client:
        yield client


def headers(api_key: str, idempotency_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Idempotency-Key": idempotency_key}


async def test_a_key_is_reusable_for_another_request_once_its_ttl_has_passed(
    api: httpx.AsyncClient, key: str, clock: ManualClock
) -> None:
    assert (await api.post("/v1/payments", json=BODY, headers=headers(key, "k"))).status_code == 201
    other = {**BODY, "biz_no": "PAY_2"}
    reused = await api.post("/v1/payments", json=other, headers=headers(key, "k"))
    assert reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    clock.advance(TTL_S + 1)
    later = await api.post("/v1/payments", json=other, headers=headers(key, "k"))
    assert later.status_code == 201 and "idempotent-replayed" not in later.headers


async def _die_after_transaction_a(
    container: Container, api_key: str, body: dict[str, object]
) -> tuple[str, str]:
    """What a request leaves behind when its process dies after transaction A: the payment and
    an unanswered key record. (Here the charge completes, but nobody stores the answer.)"""
    principal = await container.store.find_principal(bootstrap.hash_key(api_key))
    assert principal is not None
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    keyed = KeyedRequest(principal.id, "dies", fingerprint("POST", "/v1/payments", canonical))
    cmd = ChargeCommand(**body)  # type: ignore[arg-type]
    result = await container.payments.charge(
        principal.id, cmd, on_create=container.idempotency.claim(keyed)
    )
    return principal.id, result.view.payment.id


async def test_a_dead_requests_key_is_409_until_deadline_and_margin_then_the_payment(
    api: httpx.AsyncClient, key: str, container: Container, clock: ManualClock
) -> None:
    merchant_id, payment_id = await _die_after_transaction_a(container, key, BODY)
    r = await api.post("/v1/payments", json=BODY, headers=headers(key, "dies"))
    assert (r.status_code, r.json()["code"]) == (409, "REQUEST_IN_PROGRESS")
    clock.advance(IN_FLIGHT_S + 0.1)
    r = await api.post("/v1/payments", json=BODY, headers=headers(key, "dies"))
    assert (r.status_code, r.headers["idempotent-replayed"]) == (200, "true")
    assert (r.json()["id"], r.json()["status"]) == (payment_id, "SUCCESS")
    record = await container.idempotency.records.get(merchant_id, "dies")
    assert record is not None and record.response_status == 200  # settled: stored from now on


async def test_a_dead_requests_key_answers_202_while_its_payment_is_still_open(
    api: httpx.AsyncClient,
    key: str,
    container: Container,
    clock: ManualClock,
    channel: ScriptedChannel,
) -> None:
    channel.plan(Behavior.HALF_OPEN)
    await _die_after_transaction_a(container, key, BODY)
    clock.advance(IN_FLIGHT_S + 0.1)
    for _ in range(2):
        r = await api.post("/v1/payments", json=BODY, headers=headers(key, "dies"))
        assert (r.status_code, r.json()["status"]) == (202, "UNKNOWN")
    assert channel.calls == 1
