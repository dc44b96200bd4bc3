"""Outbox delivery: events written with each transition are delivered to the merchant's
`notify_url`, signed, at least once, in order per payment, with retries and backoff."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import structlog

from idempay.domain.ports import Clock, WorkQueue

log = structlog.get_logger(__name__)
NO_URL = "no notify_url"

PUBLIC_FIELDS = (
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
    "created_at",
    "updated_at",
)


class WebhookSender(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST and answer the HTTP status; raise on a transport failure."""
        ...


class EventQueue(WorkQueue, Protocol):
    async def skip_events(self, seqs: list[int], *, error: str) -> int:
        """Mark these PENDING events SKIPPED, together; the number marked."""
        ...


@dataclass(frozen=True, slots=True)
class OutboxPolicy:
    """Retries after 5 s, 30 s, 1, 5, 15, 30 min, then hourly; given up after 24 attempts."""

    backoff_s: tuple[float, ...] = (5, 30, 60, 300, 900, 1800, 3600)
    max_attempts: int = 24
    lease_s: float = 60.0
    batch: int = 100


def _has_notify_url(event: dict[str, Any]) -> bool:
    return bool(json.loads(event["data"]).get("notify_url"))


def sign(key: str, timestamp: int, body: bytes) -> str:
    """HMAC-SHA256 over "{timestamp}.{body}"; the key is SHA-256 hex of the merchant's API key."""
    return hmac.new(key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


class Outbox:
    def __init__(
        self,
        queue: EventQueue,
        sender: WebhookSender,
        clock: Clock,
        policy: OutboxPolicy | None = None,
    ) -> None:
        self.queue, self.sender, self.clock = queue, sender, clock
        self.policy = policy or OutboxPolicy()

    async def deliver_due(self) -> int:
        """Deliver one batch: objects in parallel, each object's events in order."""
        events = await self.queue.claim_events(lease_s=self.policy.lease_s, limit=self.policy.batch)
        by_object: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in events:
            by_object[e["object_id"]].append(e)
        skip: list[int] = []  # an object's first events without a notify_url: nowhere to go
        for evs in by_object.values():
            while evs and not _has_notify_url(evs[0]):
                skip.append(evs.pop(0)["seq"])
        await self.queue.skip_events(skip, error=NO_URL)  # together, in one statement
        await asyncio.gather(*(self._deliver_in_order(evs) for evs in by_object.values() if evs))
        return len(events)

    async def _deliver_in_order(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            if not await self._deliver(e):
                return  # a later event of this object waits for this one

    async def _deliver(self, e: dict[str, Any]) -> bool:
        data = json.loads(e["data"])
        url = data.get("notify_url")
        if not url:  # after an event of its object that had one (deliver_due skips the others)
            await self.queue.finish_event(
                e["seq"],
                status="SKIPPED",
                attempts=e["attempts"],
                error=NO_URL,
                next_attempt_at=None,
            )
            return True
        now = self.clock.now()
        body = json.dumps(
            {
                "event_id": e["id"],
                "type": e["kind"],
                "created_at": e["created_at"].isoformat(),
                "data": {k: data.get(k) for k in PUBLIC_FIELDS},
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        ts = int(now.timestamp())
        headers = {
            "Content-Type": "application/json",
            "Idempay-Event-Id": e["id"],
            "Idempay-Signature": f"t={ts},v1={sign(e['api_key_hash'], ts, body)}",
        }
        try:
            status, error = await self.sender.post(url, body, headers), None
        except Exception as exc:
            status, error = 0, (str(exc) or type(exc).__name__)[:200]
        attempts = int(e["attempts"]) + 1
        if 200 <= status < 300:
            await self.queue.finish_event(
                e["seq"], status="DELIVERED", attempts=attempts, error=None, next_attempt_at=None
            )
            return True
        error = error or f"HTTP {status}"
        gave_up = attempts >= self.policy.max_attempts
        delay = self.policy.backoff_s[min(attempts, len(self.policy.backoff_s)) - 1]
        await self.queue.finish_event(
            e["seq"],
            status="FAILED" if gave_up else "PENDING",
            attempts=attempts,
            error=error,
            next_attempt_at=None if gave_up else now + timedelta(seconds=delay),
        )
        log.warning(
            "webhook.failed",
            event_id=e["id"],
            merchant_id=e["merchant_id"],
            attempts=attempts,
            error=error,
            gave_up=gave_up,
        )
        return gave_up  # a dead event no longer holds back the ones after it
