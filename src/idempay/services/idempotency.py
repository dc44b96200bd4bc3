"""Idempotency-Key semantics (IETF httpapi draft, as Stripe does it): replay, reuse, in flight,
expiry, and recovery of a record whose request died before it answered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import structlog

from idempay.domain.errors import DuplicateKey, IdempotencyKeyReused, RequestInProgress
from idempay.domain.ports import Clock, IdempotencyRecord, IdempotencyRecords, Tx


class Resource(Protocol):
    """What an Idempotency-Key record points at: any resource with an id."""

    @property
    def id(self) -> str: ...


OnClaim = Callable[[Tx, Resource], Awaitable[None]]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """A request that carries an Idempotency-Key; `fingerprint` covers method, path and body."""

    merchant_id: str
    key: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Replay:
    """The stored answer of the first request with this key."""

    status: int
    body: str


@dataclass(frozen=True, slots=True)
class Orphaned:
    """In flight for longer than any live request can take: the request died (crash, kill) after
    its transaction committed. Answer from the current state of `resource_id`."""

    resource_id: str


@dataclass(frozen=True, slots=True)
class IdempotencyPolicy:
    ttl_s: float = 24 * 3600.0  # how long a key is remembered (IDEMPAY_IDEMPOTENCY_TTL_S)
    in_flight_s: float = 15.0  # after this an unanswered record is orphaned (deadline + margin)


class KeyTaken(RequestInProgress):
    """Another request claimed the key first; raised inside the resource's transaction, which
    therefore rolls back (nothing of this request is written)."""


class Idempotency:
    """Decides what a keyed request gets before it runs, and records what it answered."""

    def __init__(
        self, records: IdempotencyRecords, clock: Clock, policy: IdempotencyPolicy | None = None
    ) -> None:
        self.records = records
        self.clock = clock
        self.policy = policy or IdempotencyPolicy()

    async def check(self, req: KeyedRequest) -> Replay | Orphaned | None:
        """None: the key is free, go on. Raises IdempotencyKeyReused for another request under
        the same key, RequestInProgress while the first request may still be running."""
        record = await self.records.get(req.merchant_id, req.key)
        if record is None:
            return None
        now = self.clock.now()
        if record.expires_at <= now:
            await self.records.forget_expired(req.merchant_id, req.key, now)
            return None
        if record.fingerprint != req.fingerprint:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {req.key} was used for a different request"
            )
        if record.response_status is not None and record.response_body is not None:
            return Replay(record.response_status, record.response_body)
        age = (now - record.created_at).total_seconds()
        if age < self.policy.in_flight_s or record.resource_id is None:
            raise RequestInProgress(f"a request with Idempotency-Key {req.key} is in progress")
        log.warning("idempotency.orphaned", key_age_s=round(age, 3), resource_id=record.resource_id)
        return Orphaned(record.resource_id)

    def claim(self, req: KeyedRequest) -> OnClaim:
        """The hook that writes the in-flight record in the resource's own transaction (a
        payment's, a refund's or a split's)."""

        async def on_create(tx: Tx, resource: Resource) -> None:
            try:
                await self.records.claim(tx, self._record(req, resource.id))
            except DuplicateKey:
                raise KeyTaken(f"a request with Idempotency-Key {req.key} is in progress") from None

        return on_create

    async def answered(self, req: KeyedRequest, status: int, body: str) -> None:
        """Store the response of the request that claimed the key."""
        await self.records.complete(req.merchant_id, req.key, status, body)

    async def remember(self, req: KeyedRequest, resource_id: str, status: int, body: str) -> None:
        """Bind a key that created nothing (the biz_no existed) to the answer it got."""
        record = self._record(req, resource_id, status=status, body=body)
        await self.records.remember(record)

    def _record(
        self,
        req: KeyedRequest,
        resource_id: str,
        *,
        status: int | None = None,
        body: str | None = None,
    ) -> IdempotencyRecord:
        now = self.clock.now()
        return IdempotencyRecord(
            merchant_id=req.merchant_id,
            key=req.key,
            fingerprint=req.fingerprint,
            resource_id=resource_id,
            response_status=status,
            response_body=body,
            created_at=now,
            expires_at=now + timedelta(seconds=self.policy.ttl_s),
        )
