"""Splits through real HTTP against `idempay serve`: the 3:7 split, statuses, replays, the
Idempotency-Key, every error with nothing written, and eight identical splits racing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.expect import money_snapshot, pay, problem, resource, split_answer
from tests.e2e.server import Principal, Server

AMOUNT = 10_000
MAX_AMOUNT = 100_000_000_000
JSON = {"Content-Type": "application/json"}
THREE_SEVEN = (("distributor-7", 3000), ("platform", 7000))
DOC = Path(__file__).parents[2] / "docs" / "refunds-and-splits.md"


def split(
    split_no: Any = "SPL_1", shares: tuple[tuple[str, Any], ...] = THREE_SEVEN, **changes: Any
) -> dict[str, Any]:
    receivers = [{"receiver_id": r, "amount": a} for r, a in shares]
    body: dict[str, Any] = {"split_no": split_no, "biz_no": "PAY_1", "receivers": receivers}
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


def splits_at_channel(server: Server, payment_id: str) -> list[dict[str, Any]]:
    return [e for e in server.executions(payment_id) if e["kind"] == "SPLIT"]


def shares(body: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(i["receiver_id"], i["amount"], i["status"]) for i in body["items"]]


async def test_a_3_7_split_is_201_success_and_pays_each_receiver_once(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    body = split_answer(await client.post("/v1/splits", json=split(), headers=merchant.auth), 201)
    assert body["id"].startswith("spl_")
    assert (body["split_no"], body["biz_no"], body["amount"], body["currency"], body["status"]) == (
        "SPL_1",
        "PAY_1",
        AMOUNT,
        "CNY",
        "SUCCESS",
    )
    assert shares(body) == [("distributor-7", 3000, "SUCCESS"), ("platform", 7000, "SUCCESS")]
    executed = {
        (e["receiver_id"], e["amount"], e["request_id"])
        for e in splits_at_channel(server, payment["id"])
    }
    assert executed == {(i["receiver_id"], i["amount"], i["request_id"]) for i in body["items"]}
    assert len(splits_at_channel(server, payment["id"])) == 2
    got = resource(await client.get("/v1/payments/PAY_1", headers=merchant.auth), 200)
    assert (got["refunded_amount"], got["split_amount"]) == (0, AMOUNT)
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, AMOUNT, 0)]
    assert split_answer(await client.get("/v1/splits/SPL_1", headers=merchant.auth), 200) == body


async def test_the_same_split_again_is_200_replayed_and_executes_nothing_more(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    first = split_answer(await client.post("/v1/splits", json=split(), headers=merchant.auth), 201)
    again = await client.post("/v1/splits", json=split(), headers=merchant.auth)
    assert split_answer(again, 200, replayed=True) == first
    assert len(splits_at_channel(server, payment["id"])) == 2


async def test_the_same_split_no_with_other_parameters_is_422_biz_no_reused_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    await paid(client, merchant, "PAY_2")
    await client.post("/v1/splits", json=split(shares=((THREE_SEVEN[0]),)), headers=merchant.auth)
    before = await money_snapshot(server, merchant)
    for other, field in (
        (split(shares=(("distributor-7", 2999),)), "receivers"),
        (split(shares=(("platform", 3000),)), "receivers"),
        (split(shares=((THREE_SEVEN[0]),), biz_no="PAY_2"), "biz_no"),
    ):
        r = await client.post("/v1/splits", json=other, headers=merchant.auth)
        assert [e["field"] for e in problem(r, 422, "BIZ_NO_REUSED")["errors"]] == [field]
    assert await money_snapshot(server, merchant) == before


async def test_a_split_of_an_unpaid_payment_is_409_invalid_state_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    unknown = await client.post(
        "/v1/payments", json=pay("PAY_1", channel="halfopen"), headers=merchant.auth
    )
    assert resource(unknown, 202)["status"] == "UNKNOWN"  # half-open: charged, answer lost
    failed = await client.post(
        "/v1/payments", json=pay("PAY_2", channel="decline"), headers=merchant.auth
    )
    assert resource(failed, 201)["status"] == "FAILED"
    before = await money_snapshot(server, merchant)
    for biz_no in ("PAY_1", "PAY_2"):
        r = await client.post("/v1/splits", json=split(biz_no=biz_no), headers=merchant.auth)
        problem(r, 409, "INVALID_STATE")
    assert await money_snapshot(server, merchant) == before


async def test_a_split_above_what_is_available_is_422_insufficient_balance_and_writes_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    refunded = await client.post(
        "/v1/refunds",
        json={"refund_no": "RF_1", "biz_no": "PAY_1", "amount": 4000},
        headers=merchant.auth,
    )
    assert refunded.status_code == 201, refunded.text
    before = await money_snapshot(server, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "k-over"}
    over = split(shares=(("a", 3000), ("b", 3001)))
    problem(
        await client.post("/v1/splits", json=over, headers=headers), 422, "INSUFFICIENT_BALANCE"
    )
    assert await money_snapshot(server, merchant) == before
    rest = await client.post(
        "/v1/splits", json=split(shares=(("a", 3000), ("b", 3000))), headers=headers
    )
    assert split_answer(rest, 201)["status"] == "SUCCESS"  # exactly what is left is allowed
    assert await server.db.balances(merchant.id) == [("PAY_1", 4000, 6000, 0)]


async def test_unknown_or_another_merchants_payments_and_splits_are_404_and_write_nothing(
    client: httpx.AsyncClient, merchant: Principal, other_merchant: Principal, server: Server
) -> None:
    await paid(client, other_merchant)
    split_answer(await client.post("/v1/splits", json=split(), headers=other_merchant.auth), 201)
    before = (await money_snapshot(server, merchant), await money_snapshot(server, other_merchant))
    for biz_no in ("PAY_1", "PAY_NOPE"):
        r = await client.post(
            "/v1/splits", json=split("SPL_2", biz_no=biz_no), headers=merchant.auth
        )
        problem(r, 404, "NOT_FOUND")
    for split_no in ("SPL_1", "SPL_NOPE"):
        r = await client.get(f"/v1/splits/{split_no}", headers=merchant.auth)
        problem(r, 404, "NOT_FOUND")
    problem(
        await client.get("/v1/splits/has%20space", headers=merchant.auth), 400, "INVALID_REQUEST"
    )
    after = (await money_snapshot(server, merchant), await money_snapshot(server, other_merchant))
    assert after == before


def _receivers(*entries: Any) -> dict[str, Any]:
    return split(receivers=list(entries))


BAD_BODIES: list[dict[str, Any]] = [
    split(shares=()),
    split(shares=tuple((f"r{i}", 1) for i in range(51))),
    split(shares=(("a", 1), ("a", 2))),
    split(shares=(("a", 0),)),
    split(shares=(("a", -1),)),
    split(shares=(("a", 1.5),)),
    split(shares=(("a", "5"),)),
    split(shares=(("a", True),)),
    split(shares=(("a", MAX_AMOUNT + 1),)),
    split(shares=(("bad id", 1),)),
    split(shares=(("x" * 65, 1),)),
    split(shares=(("a", MAX_AMOUNT), ("b", MAX_AMOUNT))),
    _receivers({"receiver_id": "a", "amount": 1, "note": "x"}),
    _receivers({"receiver_id": "a"}),
    _receivers({"amount": 1}),
    _receivers("a"),
    split(receivers={"receiver_id": "a", "amount": 1}),
    split(status="SUCCESS"),
    split(amount=AMOUNT),
    split("has space"),
    split(biz_no="a/b"),
    {"split_no": "SPL_1", "biz_no": "PAY_1"},
    {"biz_no": "PAY_1", "receivers": []},
]


async def test_invalid_split_requests_are_400_413_or_415_and_write_nothing(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    await paid(client, merchant)
    before = await money_snapshot(server, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "k-bad"}
    for body in BAD_BODIES:
        r = await client.post("/v1/splits", json=body, headers=headers)
        assert problem(r, 400, "INVALID_REQUEST").get("errors"), body
    for raw in (b"[]", b'{"split_no":', b""):
        r = await client.post("/v1/splits", content=raw, headers={**headers, **JSON})
        problem(r, 400, "INVALID_REQUEST")
    huge = b'{"split_no": "SPL_1", "biz_no": "PAY_1", "receivers": [%s]}' % b",".join(
        b'{"receiver_id": "r%d", "amount": 1}' % i for i in range(2_000)
    )
    r = await client.post("/v1/splits", content=huge, headers={**headers, **JSON})
    problem(r, 413, "PAYLOAD_TOO_LARGE")
    text = {**merchant.auth, "Content-Type": "text/plain"}
    r = await client.post("/v1/splits", content=b'{"split_no": "SPL_1"}', headers=text)
    problem(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await money_snapshot(server, merchant) == before


async def test_a_split_whose_answers_are_lost_is_202_processing_and_each_item_executes_once(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant, channel="split_lost")
    body = split_answer(await client.post("/v1/splits", json=split(), headers=merchant.auth), 202)
    assert body["status"] == "PROCESSING"  # until the worker resolves every item
    assert shares(body) == [("distributor-7", 3000, "UNKNOWN"), ("platform", 7000, "UNKNOWN")]
    again = await client.post("/v1/splits", json=split(), headers=merchant.auth)
    assert split_answer(again, 202, replayed=True) == body
    executed = sorted(e["request_id"] for e in splits_at_channel(server, payment["id"]))
    assert executed == sorted(i["request_id"] for i in body["items"])
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, 0, AMOUNT)]


async def test_a_split_whose_items_are_all_declined_is_201_failed_and_releases_its_reservation(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant, channel="split_declined")
    body = split_answer(await client.post("/v1/splits", json=split(), headers=merchant.auth), 201)
    assert body["status"] == "FAILED"
    assert shares(body) == [("distributor-7", 3000, "FAILED"), ("platform", 7000, "FAILED")]
    assert splits_at_channel(server, payment["id"]) == []
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, 0, 0)]


async def test_an_idempotency_key_replays_its_split_and_another_body_under_it_is_422(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    headers = {**merchant.auth, "Idempotency-Key": "spl-key-1"}
    first = await client.post("/v1/splits", json=split(), headers=headers)
    split_answer(first, 201)
    again = await client.post("/v1/splits", json=split(), headers=headers)
    split_answer(again, 201, replayed=True)
    assert again.content == first.content
    before = await money_snapshot(server, merchant)
    for other in (split(shares=(("platform", 7000),)), split("SPL_2")):
        r = await client.post("/v1/splits", json=other, headers=headers)
        problem(r, 422, "IDEMPOTENCY_KEY_REUSED")
    assert await money_snapshot(server, merchant) == before
    problem(await client.get("/v1/splits/SPL_2", headers=merchant.auth), 404, "NOT_FOUND")
    assert len(splits_at_channel(server, payment["id"])) == 2


async def test_eight_concurrent_identical_splits_answer_one_split_and_pay_each_receiver_once(
    client: httpx.AsyncClient, merchant: Principal, server: Server
) -> None:
    payment = await paid(client, merchant)
    answers = await asyncio.gather(
        *(client.post("/v1/splits", json=split(), headers=merchant.auth) for _ in range(8))
    )
    assert {r.status_code for r in answers} <= {200, 201, 202}, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    executed = splits_at_channel(server, payment["id"])
    assert sorted((e["receiver_id"], e["amount"]) for e in executed) == sorted(THREE_SEVEN)
    assert len({e["request_id"] for e in executed}) == 2
    final = split_answer(await client.get("/v1/splits/SPL_1", headers=merchant.auth), 200)
    assert final["status"] == "SUCCESS"
    assert await server.db.balances(merchant.id) == [("PAY_1", 0, AMOUNT, 0)]


def test_the_worked_3_7_split_of_docs_refunds_and_splits_md_runs_as_printed(server: Server) -> None:
    match = re.search(r"<!-- curl-session[^>]*-->\n```sh\n(.*?)```", DOC.read_text(), re.S)
    assert match, "docs/refunds-and-splits.md lost its curl session"
    env = {
        **os.environ,
        "IDEMPAY_DATABASE_URL": server.database_url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    script = match.group(1).replace("http://127.0.0.1:8000", server.url)
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    payment, split_, after, refused = (json.loads(line) for line in run.stdout.splitlines())
    assert (payment["status"], payment["amount"], split_["status"]) == (
        "SUCCESS",
        AMOUNT,
        "SUCCESS",
    )
    assert shares(split_) == [("distributor-7", 3000, "SUCCESS"), ("platform", 7000, "SUCCESS")]
    assert (after["refunded_amount"], after["split_amount"]) == (0, AMOUNT)
    assert refused["code"] == "INSUFFICIENT_BALANCE"
