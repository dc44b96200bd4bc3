"""The `Idempotency-Key` header on POST: fingerprint the request, replay or refuse before any work,
claim the key inside the resource's transaction, store the answer after it."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Header, Request, Response

from idempay.api.metrics import Metrics
from idempay.api.schemas import ID_PATTERN
from idempay.domain.errors import IdempotencyKeyReused, RequestInProgress
from idempay.services.idempotency import (
    Idempotency,
    KeyedRequest,
    KeyTaken,
    OnClaim,
    Orphaned,
    Replay,
)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=ID_PATTERN,
        description="Optional. The same key with the same request replays the first answer "
        "(`Idempotent-Replayed: true`); with another request it is 422 IDEMPOTENCY_KEY_REUSED; "
        "while the first is still running it is 409 REQUEST_IN_PROGRESS. Kept for "
        "IDEMPAY_IDEMPOTENCY_TTL_S (default 24 h).",
    ),
]

# Renders the current state of a resource (by id) as the answer to a keyed request whose first
# attempt died before it could store its own answer; answers (status, JSON body).
Recover = Callable[[str], Awaitable[tuple[int, bytes]]]


def fingerprint(method: str, path: str, canonical_body: str) -> str:
    """SHA-256 of the method, the path and the canonical JSON of the body."""
    return hashlib.sha256(f"{method}\n{path}\n{canonical_body}".encode()).hexdigest()


def json_response(body: bytes, status: int, *, replayed: bool = False) -> Response:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Response(body, status, headers=headers, media_type="application/json")


class KeyGuard:
    """The Idempotency-Key of one request; every method is a no-op when it carried none."""

    def __init__(
        self,
        service: Idempotency,
        metrics: Metrics,
        merchant_id: str,
        key: str | None,
        request: Request,
        canonical_body: str,
        recover: Recover,
    ) -> None:
        self.service = service
        self.metrics = metrics
        self.recover = recover
        self.keyed = (
            KeyedRequest(
                merchant_id, key, fingerprint(request.method, request.url.path, canonical_body)
            )
            if key is not None
            else None
        )

    @property
    def hook(self) -> OnClaim | None:
        """Writes the in-flight record in the resource's transaction (see Payments.charge)."""
        return None if self.keyed is None else self.service.claim(self.keyed)

    async def prior(self) -> Response | None:
        """The answer owed without doing anything, or None to go on. Raises 422 for another
        request under this key and 409 while its first request may still be running."""
        if self.keyed is None:
            return None
        try:
            found = await self.service.check(self.keyed)
        except (IdempotencyKeyReused, RequestInProgress):
            self.metrics.duplicate("idempotency_key")
            raise
        if found is None:
            return None
        self.metrics.duplicate("idempotency_key")
        if isinstance(found, Replay):
            return json_response(found.body.encode(), found.status, replayed=True)
        return await self._recover(found)

    async def lost_race(self, error: Exception) -> Response:
        """This request's claim (or state change) lost to another request: if that one used the
        same key, answer as it decides; otherwise `error` stands."""
        answer = await self.prior()
        if answer is None:
            raise error
        return answer

    async def answered(self, status: int, body: bytes, *, resource_id: str, created: bool) -> None:
        """Store the answer: on the claimed record, or (nothing was created: the biz_no existed)
        on a new record binding the key to that answer."""
        if self.keyed is None:
            return
        if created:
            await self.service.answered(self.keyed, status, body.decode())
        else:
            await self.service.remember(self.keyed, resource_id, status, body.decode())

    async def _recover(self, orphan: Orphaned) -> Response:
        assert self.keyed is not None
        status, body = await self.recover(orphan.resource_id)
        if status != 202:  # settled: from now on this is the stored answer of the key
            await self.service.answered(self.keyed, status, body.decode())
        return json_response(body, status, replayed=True)


T = TypeVar("T")


async def keyed_create(
    guard: KeyGuard,
    metrics: Metrics,
    layer: str,
    create: Callable[[OnClaim | None], Awaitable[T]],
    answer: Callable[[T], tuple[int, bytes, str, bool, bool]],
) -> Response:
    """A create-or-get under an optional Idempotency-Key: the owed answer if there is one, else
    `create` with the key's claim, then store and send `answer`'s (status, body, resource id,
    created, replayed); a replay is counted as stopped by `layer`."""
    if (early := await guard.prior()) is not None:
        return early
    try:
        result = await create(guard.hook)
    except KeyTaken as e:
        return await guard.lost_race(e)
    status, body, resource_id, created, replayed = answer(result)
    await guard.answered(status, body, resource_id=resource_id, created=created)
    if replayed:
        metrics.duplicate(layer)
    return json_response(body, status, replayed=replayed)
