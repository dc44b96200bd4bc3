"""The Idempotency-Key header through real HTTP: replay, reuse (422), in flight (409), what is not
stored, and a key whose first request died with its server."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from idempay.storage import tables as t
from tests import dbs
from tests.e2e.expect import pay, problem, resource, snapshot
from tests.e2e.server import Principal, Server, create_principal


def keyed(merchant: Principal, key: str) -> dict[str, str]:
    return {**merchant.auth, "Idempotency-Key": key}


async def test_the_same_key_and_request_replays_the_stored_answer_byte_for_byte(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    first = await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "k1"))
    body = resource(first, 201)
    again = await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "k1"))
    resource(again, 201, replayed=True)
    assert again.content == first.content
    assert again.headers["x-request-id"] != first.headers["x-request-id"]
    assert len(server.executions(body["id"])) == 1


async def test_the_same_key_with_another_body_is_422_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "k1"))
    before = await snapshot(server, merchant)
    for other in (pay(amount=100), pay("PAY_OTHER"), pay(description="changed")):
        r = await client.post("/v1/payments", json=other, headers=keyed(merchant, "k1"))
        problem(r, 422, "IDEMPOTENCY_KEY_REUSED")
    assert await snapshot(server, merchant) == before
    problem(await client.get("/v1/payments/PAY_OTHER", headers=merchant.auth), 404, "NOT_FOUND")


async def test_the_same_key_on_another_endpoint_is_422(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=keyed(merchant, "k1"))
    r = await client.post("/v1/payments/PAY_ORD001/retry", headers=keyed(merchant, "k1"))
    problem(r, 422, "IDEMPOTENCY_KEY_REUSED")
    got = (await client.get("/v1/payments/PAY_ORD001", headers=merchant.auth)).json()
    assert got["attempt"] == 1


async def test_key_order_and_whitespace_do_not_change_the_fingerprint(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "k1"))
    reordered = (
        b'{ "channel":"fast","currency":"CNY","amount":19900,"order_no":"ORD001",\n'
        b'  "biz_no":"PAY_ORD001" }'
    )
    headers = {**keyed(merchant, "k1"), "Content-Type": "application/json"}
    r = await client.post("/v1/payments", content=reordered, headers=headers)
    resource(r, 201, replayed=True)


async def test_keys_belong_to_one_merchant(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal
) -> None:
    a = await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "shared"))
    b = await client.post("/v1/payments", json=pay(), headers=keyed(other_merchant, "shared"))
    assert resource(a, 201)["id"] != resource(b, 201)["id"]


async def test_a_repeated_key_while_the_first_is_in_flight_is_409_request_in_progress(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    headers = keyed(merchant, "slow-1")
    first = asyncio.create_task(
        client.post("/v1/payments", json=pay(channel="slow"), headers=headers)
    )
    await asyncio.sleep(0.4)  # the slow channel holds the first request for 1.2 s
    before = await snapshot(server, merchant)
    r = await client.post("/v1/payments", json=pay(channel="slow"), headers=headers)
    problem(r, 409, "REQUEST_IN_PROGRESS")
    assert r.headers["retry-after"] == "1"
    assert await snapshot(server, merchant) == before
    done = resource(await first, 201)
    replay = await client.post("/v1/payments", json=pay(channel="slow"), headers=headers)
    assert resource(replay, 201, replayed=True) == done
    assert len(server.executions(done["id"])) == 1


async def test_a_rejected_request_does_not_bind_its_key(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    bad = await client.post("/v1/payments", json=pay(amount=0), headers=keyed(merchant, "k1"))
    problem(bad, 400, "INVALID_REQUEST")
    await client.post("/v1/payments", json=pay(), headers=merchant.auth)
    reused = await client.post("/v1/payments", json=pay(amount=5), headers=keyed(merchant, "k1"))
    problem(reused, 422, "BIZ_NO_REUSED")
    assert await server.db.counts(merchant.id, t.idempotency_keys) == (0,)
    good = await client.post("/v1/payments", json=pay("PAY_2"), headers=keyed(merchant, "k1"))
    resource(good, 201)


async def test_a_new_key_on_an_existing_biz_no_is_bound_to_that_replay(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    first = resource(await client.post("/v1/payments", json=pay(), headers=merchant.auth), 201)
    r = await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "late"))
    assert resource(r, 200, replayed=True) == first
    again = await client.post("/v1/payments", json=pay(), headers=keyed(merchant, "late"))
    assert again.status_code == 200 and again.content == r.content
    other = await client.post("/v1/payments", json=pay("PAY_2"), headers=keyed(merchant, "late"))
    problem(other, 422, "IDEMPOTENCY_KEY_REUSED")
    assert len(server.executions(first["id"])) == 1


async def test_retry_and_close_with_a_key_replay_their_answers(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    retried = await client.post("/v1/payments/PAY_ORD001/retry", headers=keyed(merchant, "r1"))
    again = await client.post("/v1/payments/PAY_ORD001/retry", headers=keyed(merchant, "r1"))
    assert resource(again, 200, replayed=True) == resource(retried, 200)
    assert again.json()["attempt"] == 2  # not a third attempt
    closed = await client.post("/v1/payments/PAY_ORD001/close", headers=keyed(merchant, "c1"))
    closed_again = await client.post("/v1/payments/PAY_ORD001/close", headers=keyed(merchant, "c1"))
    assert resource(closed_again, 200, replayed=True) == resource(closed, 200)
    plain = await client.post("/v1/payments/PAY_ORD001/close", headers=merchant.auth)
    problem(plain, 409, "INVALID_STATE")  # without the key it is a new request


@pytest.mark.slow
async def test_a_key_whose_request_died_with_the_server_is_answered_from_the_payment(
    tmp_path: Path,
) -> None:
    """SIGKILL while the channel holds the request: the key is 409 for the channel deadline plus
    a margin (the request might still be running), then answered from the payment's state.
    SIGTERM, by contrast, lets the request in flight finish before the server exits cleanly."""
    url, _ = dbs.create("sqlite", tmp_path)
    env = {"IDEMPAY_CHANNEL_TIMEOUT_MS": "1000"}  # in flight for at most 1 s + 5 s margin
    channels = {"slow": {"kind": "scripted", "delay_ms": 3000}}
    first = Server(url, tmp_path, channels=channels, env=env).start()
    merchant = await create_principal(url, "acme")
    headers = keyed(merchant, "dies")
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=10) as c:
            request = asyncio.create_task(
                c.post("/v1/payments", json=pay(channel="slow"), headers=headers)
            )
            await asyncio.sleep(0.5)
            first.stop(signal.SIGKILL)
            with pytest.raises(httpx.TransportError):
                await request
        t0 = time.monotonic()
        second = Server(url, tmp_path, channels=channels, env=env).start()
    finally:
        first.stop()
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=10) as c:
            problem(
                await c.post("/v1/payments", json=pay(channel="slow"), headers=headers),
                409,
                "REQUEST_IN_PROGRESS",
            )
            await asyncio.sleep(max(0.0, 6.0 - (time.monotonic() - t0)))
            r = await c.post("/v1/payments", json=pay(channel="slow"), headers=headers)
            body = resource(r, 202, replayed=True)
            assert (body["status"], body["instructions"][0]["status"]) == ("PROCESSING", "PENDING")
            listed = (await c.get("/v1/payments", headers=merchant.auth)).json()["items"]
            assert [p["id"] for p in listed] == [body["id"]]
            assert second.executions() == []  # the killed request never reached the channel
            in_flight = asyncio.create_task(
                c.post("/v1/payments", json=pay("PAY_2", channel="slow"), headers=merchant.auth)
            )
            await asyncio.sleep(0.3)
            assert second.proc is not None
            second.proc.send_signal(signal.SIGTERM)
            answered = resource(await in_flight, 202)  # the channel deadline (1 s) passed: UNKNOWN
            assert answered["status"] == "UNKNOWN"
    finally:
        code = second.stop()
    assert code == 0 and '"serve.stopped"' in second.log.read_text()
