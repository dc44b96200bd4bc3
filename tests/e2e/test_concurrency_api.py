"""Many identical requests at once through real HTTP: one channel execution, one payment."""

from __future__ import annotations

import asyncio

import httpx

from tests.e2e.expect import pay
from tests.e2e.server import Principal, Server

N = 40


async def _storm(
    server: Server, headers: dict[str, str], body: dict[str, object]
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=N, max_keepalive_connections=N)
    async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as c:
        return await asyncio.gather(
            *(c.post("/v1/payments", json=body, headers=headers) for _ in range(N))
        )


async def test_40_concurrent_identical_posts_execute_once_and_answer_one_payment(
    server: Server, merchant: Principal
) -> None:
    answers = await _storm(server, merchant.auth, pay(channel="fast"))
    assert {r.status_code for r in answers} <= {200, 201, 202}, [r.text for r in answers]
    ids = {r.json()["id"] for r in answers}
    assert len(ids) == 1
    assert [r.status_code for r in answers].count(201) == 1
    assert all(
        r.headers.get("idempotent-replayed") == "true" for r in answers if r.status_code != 201
    )
    assert len(server.executions(ids.pop())) == 1


async def test_40_concurrent_posts_with_one_idempotency_key_execute_once(
    server: Server, merchant: Principal
) -> None:
    headers = {**merchant.auth, "Idempotency-Key": "storm"}
    answers = await _storm(server, headers, pay(channel="fast"))
    by_status: dict[int, int] = {}
    for r in answers:
        by_status[r.status_code] = by_status.get(r.status_code, 0) + 1
    assert set(by_status) <= {200, 201, 202, 409}, [r.text for r in answers]
    # one request created the payment; the others were refused while it ran (409) or replayed
    # (its stored 201 once it had answered, or 200 when they got past the key to the biz_no)
    fresh = [r for r in answers if r.headers.get("idempotent-replayed") != "true"]
    assert [r.status_code for r in fresh if r.status_code != 409] == [201]
    ids = {r.json()["id"] for r in answers if r.status_code != 409}
    assert len(ids) == 1
    for r in answers:
        if r.status_code == 409:
            assert r.json()["code"] == "REQUEST_IN_PROGRESS"
    assert len(server.executions(ids.pop())) == 1
