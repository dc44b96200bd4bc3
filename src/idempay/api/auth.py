"""Bearer-key authentication: merchants on /v1/*, operators on /v1/ops/*. Keys are stored hashed
and compared in constant time; every merchant query is scoped by the merchant it names."""

from __future__ import annotations

import hmac
import time
from typing import Annotated, cast

import structlog
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from idempay.bootstrap import Container, hash_key
from idempay.domain.errors import Forbidden, Unauthenticated
from idempay.domain.model import Principal

MAX_KEY_CHARS = 512

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="`Authorization: Bearer <api_key>`, the key printed by `idempay merchant create`"
    " (or `idempay operator create` for /v1/ops/*).",
)


async def get_container(request: Request) -> Container:
    return cast(Container, request.app.state.container)


ContainerDep = Annotated[Container, Depends(get_container)]


class PrincipalCache:
    """Keys found in the database, trusted for `ttl_s` (IDEMPAY_AUTH_CACHE_MS) so that a busy
    client costs no query per request. Only hits are kept: a key created a moment ago works at
    once, and an unknown key always reaches the database. Bounded: full means cleared."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._found: dict[str, tuple[float, Principal, str]] = {}

    def get(self, key_hash: str) -> tuple[Principal, str] | None:
        hit = self._found.get(key_hash)
        if hit is None or hit[0] <= time.monotonic():
            return None
        return hit[1], hit[2]

    def put(self, key_hash: str, principal: Principal, stored_hash: str) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._found) >= self.max_entries:
            self._found.clear()
        self._found[key_hash] = (time.monotonic() + self.ttl_s, principal, stored_hash)


async def authenticate(
    request: Request,
    container: ContainerDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller: 401 UNAUTHENTICATED for a missing, malformed or unknown key."""
    if credentials is None or len(credentials.credentials) > MAX_KEY_CHARS:
        raise Unauthenticated("an Authorization: Bearer <api_key> header is required")
    presented = hash_key(credentials.credentials)
    cache: PrincipalCache = request.app.state.principals
    found = cache.get(presented)
    if found is None:
        found = await container.store.find_principal_hash(presented)
        if found is not None:
            cache.put(presented, *found)
    if found is None or not hmac.compare_digest(found[1], presented):
        raise Unauthenticated("unknown API key")
    principal = found[0]
    role = "operator_id" if principal.is_operator else "merchant_id"
    structlog.contextvars.bind_contextvars(**{role: principal.id})
    return principal


async def merchant(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    if principal.is_operator:
        raise Forbidden("this endpoint needs a merchant key")
    return principal


async def operator(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    if not principal.is_operator:
        raise Forbidden("this endpoint needs an operator key")
    return principal


MerchantDep = Annotated[Principal, Depends(merchant)]
OperatorDep = Annotated[Principal, Depends(operator)]
