"""The demo's clients: merchants' order systems that retry on timeouts and 5xx, behind an API
gateway that retries too (seeds/001: client retries x gateway retries)."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

DEFINITIVE = {"SUCCESS", "FAILED", "CLOSED"}


@dataclass(frozen=True)
class RetryPolicy:
    client_retries: int = 3
    gateway_retries: int = 1
    timeout_s: float = 2.0
    backoff_s: float = 0.3


@dataclass
class Outcome:
    biz_no: str
    amount: int
    status: str = "UNKNOWN"  # what the client finally believes
    sends: int = 0
    latency_s: float = 0.0


@dataclass
class Payment:
    biz_no: str
    amount: int


def payments(n: int, seed: int) -> list[Payment]:
    rnd = random.Random(seed)
    return [Payment(f"PAY_{seed}_{i:05d}", rnd.randint(100, 500_000)) for i in range(n)]


Send = Callable[[httpx.AsyncClient, Payment, int], Awaitable[str | None]]


async def with_retries(
    client: httpx.AsyncClient, p: Payment, send: Send, policy: RetryPolicy
) -> Outcome:
    """Send until an answer arrives; every client attempt is retried by the gateway as well.
    `send` answers the status it got, or None for a timeout, dropped connection or 5xx."""
    out = Outcome(p.biz_no, p.amount)
    started = time.perf_counter()
    for attempt in range(policy.client_retries + 1):
        for _ in range(policy.gateway_retries + 1):
            out.sends += 1
            status = await send(client, p, out.sends)
            if status is not None:
                out.status = status
                out.latency_s = time.perf_counter() - started
                return out
        await asyncio.sleep(policy.backoff_s * 2**attempt)
    out.latency_s = time.perf_counter() - started
    return out


def idempay_sender(base_url: str, api_key: str, timeout_s: float) -> Send:
    headers = {"Authorization": f"Bearer {api_key}"}

    async def send(client: httpx.AsyncClient, p: Payment, _n: int) -> str | None:
        body = {
            "biz_no": p.biz_no,
            "order_no": p.biz_no.replace("PAY", "ORD"),
            "amount": p.amount,
            "currency": "CNY",
            "channel": "simbank",
        }
        try:
            r = await client.post(
                f"{base_url}/v1/payments", json=body, headers=headers, timeout=timeout_s
            )
        except httpx.HTTPError:
            return None
        if r.status_code >= 500:
            return None
        return (
            str(r.json().get("status", "UNKNOWN"))
            if r.status_code < 300
            else f"HTTP {r.status_code}"
        )

    return send


def naive_sender(sim_url: str, timeout_s: float, *, new_number_each_retry: bool) -> Send:
    """A client calling the bank directly, without idempay. "new number": every retry is a new
    request (the bank cannot know it is the same payment); "same number": retries reuse it (and
    rely on the bank's idempotency, which in seeds/002 had failed)."""
    first: dict[str, str] = {}

    async def send(client: httpx.AsyncClient, p: Payment, n: int) -> str | None:
        rid = (
            f"{p.biz_no}-{secrets.token_hex(4)}"
            if new_number_each_retry
            else first.setdefault(p.biz_no, f"{p.biz_no}-1")
        )
        body = {"request_id": rid, "payment_ref": p.biz_no, "amount": p.amount, "currency": "CNY"}
        try:
            r = await client.post(f"{sim_url}/bank/pay", json=body, timeout=timeout_s)
        except httpx.HTTPError:
            return None
        if r.status_code >= 500:
            return None
        status = str(r.json().get("status", "UNKNOWN"))
        return status if status in DEFINITIVE else "UNKNOWN"

    return send


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    done: int = 0


async def drive(
    plan: list[Payment],
    send: Send,
    policy: RetryPolicy,
    concurrency: int,
    run: Run,
    on_progress: Callable[[int], None] | None = None,
) -> Run:
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(p: Payment) -> None:
            async with sem:
                run.outcomes.append(await with_retries(client, p, send, policy))
            run.done += 1
            if on_progress is not None:
                on_progress(1)

        await asyncio.gather(*(one(p) for p in plan))
    return run
