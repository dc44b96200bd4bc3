"""The front lock around a create-or-get: a cheap first filter for concurrent duplicates.

Never the source of truth: whatever it says, the database's unique keys and the CAS decide.
A loser never reaches the channel; it waits (bounded) for the winner's row and answers it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from idempay.domain.ports import FrontLock

T = TypeVar("T")


class Unlocked:
    """No front lock configured: every request goes straight to the database."""

    async def acquire(self, key: str, ttl_ms: int) -> str | None:
        return ""

    async def release(self, key: str, token: str) -> None:
        return None


@asynccontextmanager
async def holding(lock: FrontLock, key: str, ttl_ms: int) -> AsyncIterator[bool]:
    """True inside when this request may go on (it holds the lock, or there is no usable lock);
    False when another request holds it. Released by compare-and-delete on the way out."""
    token = await lock.acquire(key, ttl_ms)
    try:
        yield token is not None
    finally:
        if token:
            await lock.release(key, token)


async def wait_visible(fetch: Callable[[], Awaitable[T | None]], bound_s: float = 0.3) -> T | None:
    """Poll `fetch` until it finds the winner's row or `bound_s` passes."""
    deadline = asyncio.get_running_loop().time() + bound_s
    while True:
        found = await fetch()
        if found is not None or asyncio.get_running_loop().time() >= deadline:
            return found
        await asyncio.sleep(0.02)
