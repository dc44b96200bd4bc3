"""Payments through real HTTP against `idempay serve`: statuses, resources, replays, retry and
close."""

from __future__ import annotations

import asyncio

import httpx

from tests.e2e.expect import pay, problem, resource, snapshot
from tests.e2e.server import Principal, Server


async def test_a_new_payment_is_201_with_the_resource_of_api_md(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    body = resource(await client.post("/v1/payments", json=pay(), headers=merchant.auth), 201)
    assert body["id"].startswith("pay_")
    assert (body["biz_no"], body["order_no"], body["amount"], body["currency"]) == (
        "PAY_ORD001",
        "ORD001",
        19900,
        "CNY",
    )
    assert (body["status"], body["attempt"], body["refunded_amount"], body["split_amount"]) == (
        "SUCCESS",
        1,
        0,
        0,
    )
    [instruction] = body["instructions"]
    assert (instruction["status"], instruction["query_count"]) == ("SUCCESS", 0)
    assert [e["request_id"] for e in server.executions(body["id"])] == [instruction["request_id"]]


async def test_the_same_biz_no_again_is_200_replayed_and_never_calls_the_channel(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    first = resource(await client.post("/v1/payments", json=pay(), headers=merchant.auth), 201)
    again = await client.post("/v1/payments", json=pay(), headers=merchant.auth)
    assert resource(again, 200, replayed=True) == first
    assert len(server.executions(first["id"])) == 1


async def test_the_same_biz_no_with_another_amount_is_422_biz_no_reused_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await client.post("/v1/payments", json=pay(), headers=merchant.auth)
    before = await snapshot(server, merchant)
    r = await client.post("/v1/payments", json=pay(amount=100), headers=merchant.auth)
    doc = problem(r, 422, "BIZ_NO_REUSED")
    assert doc["errors"] == [{"field": "amount", "message": "differs from the existing one"}]
    assert await snapshot(server, merchant) == before


async def test_a_lost_answer_is_202_unknown_and_a_repeat_executes_nothing_more(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    r = await client.post("/v1/payments", json=pay(channel="halfopen"), headers=merchant.auth)
    body = resource(r, 202)
    assert body["status"] == "UNKNOWN" and body["instructions"][0]["status"] == "UNKNOWN"
    again = await client.post("/v1/payments", json=pay(channel="halfopen"), headers=merchant.auth)
    assert resource(again, 202, replayed=True)["status"] == "UNKNOWN"
    assert len(server.executions(body["id"])) == 1  # the bank charged once, and only once


async def test_a_pending_channel_answer_is_202_processing(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    r = await client.post("/v1/payments", json=pay(channel="pending"), headers=merchant.auth)
    assert resource(r, 202)["status"] == "PROCESSING"


async def test_a_repeat_while_the_first_is_in_flight_answers_202_at_once_never_409(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    first = asyncio.create_task(
        client.post("/v1/payments", json=pay(channel="slow"), headers=merchant.auth)
    )
    await asyncio.sleep(0.4)  # the slow channel holds the first request for 1.2 s
    repeat = await client.post("/v1/payments", json=pay(channel="slow"), headers=merchant.auth)
    assert not first.done()  # answered while the first is still waiting for the channel
    assert resource(repeat, 202, replayed=True)["status"] == "PROCESSING"
    done = resource(await first, 201)
    assert done["id"] == repeat.json()["id"] and len(server.executions(done["id"])) == 1


async def test_get_answers_the_resource_and_an_unknown_biz_no_is_404(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    created = (await client.post("/v1/payments", json=pay(), headers=merchant.auth)).json()
    got = await client.get("/v1/payments/PAY_ORD001", headers=merchant.auth)
    assert resource(got, 200) == created
    problem(await client.get("/v1/payments/PAY_NOPE", headers=merchant.auth), 404, "NOT_FOUND")


async def test_list_is_newest_first_and_pages_with_an_opaque_cursor(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    ids = []
    for n in range(3):
        r = await client.post("/v1/payments", json=pay(f"PAY_{n}"), headers=merchant.auth)
        ids.append(r.json()["id"])
    page = (await client.get("/v1/payments?limit=2", headers=merchant.auth)).json()
    assert [p["id"] for p in page["items"]] == ids[:0:-1] and page["next_cursor"]
    for item in page["items"]:
        assert set(item) >= {"id", "status", "instructions"}
    rest = await client.get(
        "/v1/payments", params={"limit": 2, "cursor": page["next_cursor"]}, headers=merchant.auth
    )
    assert rest.json() == {"items": [rest.json()["items"][0]], "next_cursor": None}
    assert rest.json()["items"][0]["id"] == ids[0]
    default = (await client.get("/v1/payments", headers=merchant.auth)).json()
    assert len(default["items"]) == 3 and default["next_cursor"] is None


async def test_list_filters_by_order_no_and_status(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await client.post("/v1/payments", json=pay("A", order_no="O1"), headers=merchant.auth)
    await client.post("/v1/payments", json=pay("B", order_no="O2"), headers=merchant.auth)
    await client.post(
        "/v1/payments", json=pay("C", order_no="O2", channel="decline"), headers=merchant.auth
    )

    async def biz_nos(**params: str) -> list[str]:
        r = await client.get("/v1/payments", params=params, headers=merchant.auth)
        assert r.status_code == 200, r.text
        return [p["biz_no"] for p in r.json()["items"]]

    assert await biz_nos(order_no="O2") == ["C", "B"]
    assert await biz_nos(status="FAILED") == ["C"]
    assert await biz_nos(order_no="O1", status="SUCCESS") == ["A"]
    assert await biz_nos(status="CLOSED") == []


async def test_a_declined_payment_is_201_failed_and_retry_sends_a_new_request_id(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    failed = await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    first = resource(failed, 201)
    assert first["status"] == "FAILED"
    r = await client.post("/v1/payments/PAY_ORD001/retry", headers=merchant.auth)
    retried = resource(r, 200)
    assert (retried["status"], retried["attempt"], len(retried["instructions"])) == ("FAILED", 2, 2)
    assert len({i["request_id"] for i in retried["instructions"]}) == 2
    assert server.executions(first["id"]) == []  # a decline executes nothing


async def test_retry_with_a_new_amount_keeps_the_biz_no_and_succeeds(
    client: httpx.AsyncClient, merchant: Principal, server: Server, operator: Principal
) -> None:
    r = await client.post("/v1/payments", json=pay(channel="flaky"), headers=merchant.auth)
    assert resource(r, 201)["status"] == "FAILED"  # only this test uses the flaky channel
    retried = await client.post(
        "/v1/payments/PAY_ORD001/retry", json={"amount": 25000}, headers=merchant.auth
    )
    body = resource(retried, 200)
    assert (body["biz_no"], body["amount"], body["status"], body["attempt"]) == (
        "PAY_ORD001",
        25000,
        "SUCCESS",
        2,
    )
    [execution] = server.executions(body["id"])
    assert execution["amount"] == 25000
    ops = (await client.get(f"/v1/ops/payments/{body['id']}", headers=operator.auth)).json()
    assert any("amount changed 19900 -> 25000" in t["reason"] for t in ops["transitions"])
    again = await client.post("/v1/payments", json=pay(channel="flaky"), headers=merchant.auth)
    problem(again, 422, "BIZ_NO_REUSED")  # the change is explicit: the old amount is refused


async def test_retry_and_close_outside_their_states_are_409_invalid_state(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await client.post("/v1/payments", json=pay(), headers=merchant.auth)
    before = await snapshot(server, merchant)
    for action in ("retry", "close"):
        r = await client.post(f"/v1/payments/PAY_ORD001/{action}", headers=merchant.auth)
        problem(r, 409, "INVALID_STATE")
    assert await snapshot(server, merchant) == before


async def test_close_from_failed_is_200_closed_and_final(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await client.post("/v1/payments", json=pay(channel="decline"), headers=merchant.auth)
    closed = await client.post("/v1/payments/PAY_ORD001/close", json={}, headers=merchant.auth)
    assert resource(closed, 200)["status"] == "CLOSED"
    for action in ("retry", "close"):
        r = await client.post(f"/v1/payments/PAY_ORD001/{action}", headers=merchant.auth)
        problem(r, 409, "INVALID_STATE")


async def test_retry_and_close_of_an_unknown_biz_no_are_404(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    for action in ("retry", "close"):
        r = await client.post(f"/v1/payments/PAY_NOPE/{action}", headers=merchant.auth)
        problem(r, 404, "NOT_FOUND")
