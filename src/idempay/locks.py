"""The front lock (FrontLock port): Redis `SET key token NX PX ttl`, released by compare-and-delete.

A fast path in front of the database, never the source of truth: when Redis is unreachable, slow
or restarted empty, callers proceed without a lock and the database constraints and CAS keep
correctness. Failures are logged at most once per interval and counted.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from types import MappingProxyType

import structlog
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from idempay.services.frontlock import Unlocked

log = structlog.get_logger(__name__)

# Delete the key only if it still holds our token: a request never frees another's lock.
RELEASE = """
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
end
return 0
"""
UNLOCKED = ""  # the token of "no lock was taken, carry on" (Redis unusable)
# What an acquire ended in (exported to /metrics): a token, another holder, or no usable Redis.
ACQUIRED, BUSY, UNAVAILABLE = "acquired", "busy", "unavailable"
ACQUIRE_RESULTS = (ACQUIRED, BUSY, UNAVAILABLE)


class NoLock(Unlocked):
    """Used without IDEMPAY_REDIS_URL: the services' Unlocked, with the counters /metrics reads
    (always zero) and a close."""

    degraded = 0
    acquisitions: Mapping[str, int] = MappingProxyType(dict.fromkeys(ACQUIRE_RESULTS, 0))

    async def aclose(self) -> None:
        return None


class RedisFrontLock:
    def __init__(self, url: str, *, deadline_ms: int = 50, log_every_s: float = 30.0) -> None:
        self.client = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=deadline_ms / 1000,
            socket_timeout=deadline_ms / 1000,
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self.deadline_s = deadline_ms / 1000
        self.log_every_s = log_every_s
        self.degraded = 0  # how many calls went without Redis (exported to /metrics)
        self.acquisitions = dict.fromkeys(ACQUIRE_RESULTS, 0)  # by result (exported to /metrics)
        self._last_log = 0.0
        self._release = self.client.register_script(RELEASE)

    async def acquire(self, key: str, ttl_ms: int) -> str | None:
        """A token when this caller holds `key`; None when another does; UNLOCKED when Redis
        cannot answer in time (the caller goes on without the lock)."""
        token = secrets.token_hex(16)
        try:
            async with asyncio.timeout(self.deadline_s):
                won = await self.client.set(key, token, nx=True, px=ttl_ms)
        except (RedisError, OSError, TimeoutError) as e:
            self.acquisitions[UNAVAILABLE] += 1
            self._degrade("acquire", e)
            return UNLOCKED
        self.acquisitions[ACQUIRED if won else BUSY] += 1
        return token if won else None

    async def release(self, key: str, token: str) -> None:
        if token == UNLOCKED:
            return
        try:
            async with asyncio.timeout(self.deadline_s):
                await self._release(keys=[key], args=[token])
        except (RedisError, OSError, TimeoutError) as e:
            self._degrade("release", e)  # the lock expires by its TTL

    def _degrade(self, op: str, error: BaseException) -> None:
        self.degraded += 1
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            log.warning(
                "front_lock.unavailable",
                op=op,
                error=type(error).__name__,
                degraded_total=self.degraded,
            )

    async def aclose(self) -> None:
        await self.client.aclose()
