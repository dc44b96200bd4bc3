"""Refunds through real HTTP against `idempay serve`: statuses, the resource, replays, the
Idempotency-Key, every error with nothing written, and ten refunds racing for one payment."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.e2e.expect import money_snapshot, pay, problem, refund_answer, resource
from tests.e2e.server import Principal, Server

AMOUNT = 10_000
MAX_AMOUNT = 100_000_000_000
JSON = {"Content-Type": "application/json"}


def refund(refund_no: Any = "RF_1", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"refund_no": refund_no, "biz_no": "PAY_1", "amount": 2500}
    body.update(changes)
    return body


async def paid(
    client: httpx.AsyncClient, merchant: Principal, biz_no: str = "PAY_1", channel: str = "fast"
) -> dict[str, Any]:
    r = await client.post(
        "/v1/payments", json=pay(biz_no, amount=AMOUNT, channel=channel), headers=merchant.auth
    )
    body = resource(r, 201)
    assert body["status"] == "SUCCESS"
    return body


def refunds_at_channel(server: Server, payment_id: str) -> list[dict[str, Any]]:
    return [e for e in server.executions(payment_id) if e["kind"] == "REFUND"]


async def test_a_refund_of_a_paid_payment_is_201_success_and_moves_the_amount_to_refunded(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    r = await client.post("/v1/refunds", json=refund(reason="damaged"), headers=merchant.auth)
    body = refund_answer(r, 201)
    assert body["id"].startswith("rfd_")
    assert (body["refund_no"], body["biz_no"], body["amount"], body["currency"]) == (
        "RF_1",
        "PAY_1",
        2500,
        "CNY",
    )
    assert (body["status"], body["reason"]) == ("SUCCESS", "damaged")
    [instruction] = body["instructions"]
    assert (instruction["status"], instruction["query_count"]) == ("SUCCESS", 0)
    [execution] = refunds_at_channel(server, payment["id"])
    assert (execution["request_id"], execution["amount"]) == (instruction["request_id"], 2500)
    got = await client.get("/v1/payments/PAY_1", headers=merchant.auth)
    assert resource(got, 200)["refunded_amount"] == 2500
    assert await server.db.balances(merchant.id) == [("PAY_1", 2500, 0, 0)]
    assert refund_answer(await client.get("/v1/refunds/RF_1", headers=merchant.auth), 200) == body


async def test_the_same_refund_again_is_200_replayed_and_never_calls_the_channel_again(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    first = refund_answer(
        await client.post("/v1/refunds", json=refund(), headers=merchant.auth), 201
    )
    again = await client.post("/v1/refunds", json=refund(), headers=merchant.auth)
    assert refund_answer(again, 200, replayed=True) == first
    assert len(refunds_at_channel(server, payment["id"])) == 1
    assert await server.db.balances(merchant.id) == [("PAY_1", 2500, 0, 0)]


async def test_the_same_refund_no_with_other_parameters_is_422_biz_no_reused_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    await paid(client, merchant, "PAY_2")
    await client.post("/v1/refunds", json=refund(), headers=merchant.auth)
    before = await money_snapshot(server, merchant)
    for changes, field in (({"amount": 2600}, "amount"), ({"biz_no": "PAY_2"}, "biz_no")):
        r = await client.post("/v1/refunds", json=refund(**changes), headers=merchant.auth)
        assert [e["field"] for e in problem(r, 422, "BIZ_NO_REUSED")["errors"]] == [field]
    assert await money_snapshot(server, merchant) == before


async def test_a_refund_whose_answer_is_lost_is_202_unknown_and_keeps_its_reservation(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant, channel="refund_lost")
    r = await client.post("/v1/refunds", json=refund(amount=6000), headers=merchant.auth)
    body = refund_answer(r, 202)
    assert body["status"] == "UNKNOWN" and body["instructions"][0]["status"] == "UNKNOWN"
    again = await client.post("/v1/refunds", json=refund(amount=6000), headers=merchant.auth)
    assert refund_answer(again, 202, replayed=True) == body
    assert len(refunds_at_channel(server, payment["id"])) == 1  # executed once, answer lost
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, 0, 6000)]
    over = await client.post("/v1/refunds", json=refund("RF_2", amount=5000), headers=merchant.auth)
    problem(over, 422, "INSUFFICIENT_BALANCE")  # the reservation in flight counts
    assert refund_answer(await client.get("/v1/refunds/RF_1", headers=merchant.auth), 200) == body


async def test_a_refund_the_channel_is_still_processing_is_202_processing(
    client: httpx.AsyncClient, merchant: Principal
) -> None:
    await paid(client, merchant, channel="refund_pending")
    r = await client.post("/v1/refunds", json=refund(), headers=merchant.auth)
    body = refund_answer(r, 202)
    assert (body["status"], body["instructions"][0]["status"]) == ("PROCESSING", "PROCESSING")


async def test_a_declined_refund_is_201_failed_and_releases_its_reservation(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant, channel="refund_declined")
    r = await client.post("/v1/refunds", json=refund(amount=AMOUNT), headers=merchant.auth)
    body = refund_answer(r, 201)
    assert (body["status"], body["instructions"][0]["status"]) == ("FAILED", "FAILED")
    assert refunds_at_channel(server, payment["id"]) == []
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, 0, 0)]


async def test_a_refund_of_an_unknown_or_another_merchants_payment_is_404_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal, server: Server
) -> None:
    await paid(client, other_merchant, "PAY_THEIRS")
    before = (await money_snapshot(server, merchant), await money_snapshot(server, other_merchant))
    for biz_no in ("PAY_THEIRS", "PAY_NOPE"):
        r = await client.post("/v1/refunds", json=refund(biz_no=biz_no), headers=merchant.auth)
        problem(r, 404, "NOT_FOUND")
    after = (await money_snapshot(server, merchant), await money_snapshot(server, other_merchant))
    assert after == before


async def test_get_of_an_unknown_or_another_merchants_refund_is_404_and_a_bad_refund_no_400(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal
) -> None:
    await paid(client, other_merchant)
    theirs = await client.post("/v1/refunds", json=refund(), headers=other_merchant.auth)
    refund_answer(theirs, 201)
    for refund_no in ("RF_1", "RF_NOPE"):
        r = await client.get(f"/v1/refunds/{refund_no}", headers=merchant.auth)
        problem(r, 404, "NOT_FOUND")
    for bad in ("x" * 65, "has%20space"):
        problem(
            await client.get(f"/v1/refunds/{bad}", headers=merchant.auth), 400, "INVALID_REQUEST"
        )


async def test_a_refund_of_an_unpaid_payment_is_409_invalid_state_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    unknown = await client.post(
        "/v1/payments", json=pay("PAY_1", channel="halfopen"), headers=merchant.auth
    )
    assert resource(unknown, 202)["status"] == "UNKNOWN"
    failed = await client.post(
        "/v1/payments", json=pay("PAY_2", channel="decline"), headers=merchant.auth
    )
    assert resource(failed, 201)["status"] == "FAILED"
    before = await money_snapshot(server, merchant)
    for biz_no in ("PAY_1", "PAY_2"):
        r = await client.post("/v1/refunds", json=refund(biz_no=biz_no), headers=merchant.auth)
        problem(r, 409, "INVALID_STATE")
    assert await money_snapshot(server, merchant) == before


async def test_a_refund_above_what_is_available_is_422_insufficient_balance_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    await client.post("/v1/refunds", json=refund(amount=7000), headers=merchant.auth)
    before = await money_snapshot(server, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "k-over"}
    r = await client.post("/v1/refunds", json=refund("RF_2", amount=3001), headers=headers)
    problem(r, 422, "INSUFFICIENT_BALANCE")
    assert await money_snapshot(server, merchant) == before
    rest = await client.post("/v1/refunds", json=refund("RF_2", amount=3000), headers=headers)
    assert refund_answer(rest, 201)["status"] == "SUCCESS"  # exactly what is left is allowed
    assert await server.db.balances(merchant.id) == [("PAY_1", AMOUNT, 0, 0)]


BAD_BODIES: list[dict[str, Any]] = [
    refund(status="SUCCESS"),
    refund(currency="CNY"),
    refund(amount=25.0),
    refund(amount=25.5),
    refund(amount="2500"),
    refund(amount=True),
    refund(amount=None),
    refund(amount=0),
    refund(amount=-1),
    refund(amount=MAX_AMOUNT + 1),
    refund(amount=2**63),
    refund("has space"),
    refund("x" * 65),
    refund(""),
    refund(5),
    refund(biz_no="a/b"),
    refund(reason="x" * 257),
    refund(reason=42),
    refund(reason="nul\x00byte"),
    {"biz_no": "PAY_1", "amount": 1},
    {"refund_no": "RF_1", "amount": 1},
    {"refund_no": "RF_1", "biz_no": "PAY_1"},
]
BAD_RAW = [b'{"refund_no": "RF_1", "biz_no": "PAY_1", "amount": 1e3}', b"[]", b'{"refund_no":', b""]


async def test_invalid_refund_requests_are_400_and_write_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    before = await money_snapshot(server, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "k-bad"}
    for body in BAD_BODIES:
        r = await client.post("/v1/refunds", json=body, headers=headers)
        assert problem(r, 400, "INVALID_REQUEST").get("errors"), body
    for raw in BAD_RAW:
        r = await client.post("/v1/refunds", content=raw, headers={**headers, **JSON})
        problem(r, 400, "INVALID_REQUEST")
    r = await client.post("/v1/refunds?amount=1", json=refund(), headers=headers)
    problem(r, 400, "INVALID_REQUEST")
    assert await money_snapshot(server, merchant) == before


async def test_an_oversized_body_is_413_and_a_body_that_is_not_json_is_415(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    before = await money_snapshot(server, merchant)
    huge = b'{"refund_no": "RF_1", "biz_no": "PAY_1", "amount": 1, "reason": "%s"}' % (
        b"x" * 70_000
    )
    r = await client.post("/v1/refunds", content=huge, headers={**merchant.auth, **JSON})
    problem(r, 413, "PAYLOAD_TOO_LARGE")
    text = {**merchant.auth, "Content-Type": "text/plain"}
    r = await client.post("/v1/refunds", content=b'{"refund_no": "RF_1"}', headers=text)
    problem(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await money_snapshot(server, merchant) == before


async def test_an_idempotency_key_replays_its_refund_and_another_body_under_it_is_422(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "rf-key-1"}
    first = await client.post("/v1/refunds", json=refund(), headers=headers)
    refund_answer(first, 201)
    again = await client.post("/v1/refunds", json=refund(), headers=headers)
    refund_answer(again, 201, replayed=True)
    assert again.content == first.content
    before = await money_snapshot(server, merchant)
    for other in (refund(amount=100), refund("RF_2")):
        r = await client.post("/v1/refunds", json=other, headers=headers)
        problem(r, 422, "IDEMPOTENCY_KEY_REUSED")
    assert await money_snapshot(server, merchant) == before
    problem(await client.get("/v1/refunds/RF_2", headers=merchant.auth), 404, "NOT_FOUND")
    assert len(refunds_at_channel(server, payment["id"])) == 1


async def test_ten_concurrent_refunds_of_30_percent_accept_exactly_three_and_never_over_refund(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    answers = await asyncio.gather(
        *(
            client.post("/v1/refunds", json=refund(f"RF_{i}", amount=3000), headers=merchant.auth)
            for i in range(10)
        )
    )
    accepted = [refund_answer(r, 201) for r in answers if r.status_code == 201]
    refused = [problem(r, 422, "INSUFFICIENT_BALANCE") for r in answers if r.status_code != 201]
    assert (len(accepted), len(refused)) == (3, 7)
    assert {a["status"] for a in accepted} == {"SUCCESS"}
    executed = refunds_at_channel(server, payment["id"])
    assert sum(e["amount"] for e in executed) == 9000 <= AMOUNT
    assert sorted(e["request_id"] for e in executed) == sorted(
        a["instructions"][0]["request_id"] for a in accepted
    )
    assert await server.db.balances(merchant.id) == [("PAY_1", 9000, 0, 0)]
