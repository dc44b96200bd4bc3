"""Signed callbacks to each operation's notify_url once it is final (SUCCESS or FAILED):
redelivered on a non-2xx answer or a connection error after 0.5, 1, 2, 5, 10 and 30 s, then
given up; duplicated, delayed or lost as the faults decided."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable

import httpx
import structlog

from idempay.simbank.background import Background
from idempay.simbank.faults import Decision
from idempay.simbank.ledger import Execution
from idempay.simbank.signing import signed_headers

log = structlog.get_logger("idempay.simbank.callbacks")

REDELIVERY_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # waits between attempts; 7 attempts in all
DUPLICATE_GAP_S = 0.05  # the second copy of a duplicated callback leaves this much later
DELIVERY_TIMEOUT_S = 5.0


def callback_body(e: Execution, notify_id: str, timestamp: int) -> bytes:
    payload = {"notify_id": notify_id, **e.public(), "timestamp": timestamp}
    return json.dumps(payload, separators=(",", ":")).encode()


class Notifier:
    def __init__(
        self, secret: str, background: Background, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = secret
        self._background = background
        self._clock = clock
        self._client = httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_S)

    async def aclose(self) -> None:
        await self._client.aclose()

    def notify(self, e: Execution, decision: Decision, delay_ms: int) -> str | None:
        """Schedule the callback of a final execution; its notify_id (None when none is sent)."""
        if not e.notify_url:
            return None
        if decision.callback_loss:
            log.info("simbank.callback_lost", request_id=e.request_id)
            return None
        notify_id = f"ntf_{secrets.token_hex(12)}"
        for copy in range(2 if decision.callback_duplicate else 1):
            delay_s = delay_ms / 1000 + copy * DUPLICATE_GAP_S
            self._background.spawn(self._deliver(e, e.notify_url, notify_id, delay_s))
        return notify_id

    async def _deliver(self, e: Execution, url: str, notify_id: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        for wait_s in (*REDELIVERY_S, None):
            if await self._attempt(e, url, notify_id):
                return
            if wait_s is None:
                log.warning(
                    "simbank.callback_given_up", request_id=e.request_id, notify_id=notify_id
                )
                return
            await asyncio.sleep(wait_s)

    async def _attempt(self, e: Execution, url: str, notify_id: str) -> bool:
        timestamp = int(self._clock())
        body = callback_body(e, notify_id, timestamp)
        headers = signed_headers(self._secret, body, timestamp)
        try:
            answer = await self._client.post(url, content=body, headers=headers)
        except httpx.HTTPError as err:
            log.info("simbank.callback_failed", request_id=e.request_id, error=type(err).__name__)
            return False
        return 200 <= answer.status_code < 300
