"""The API-key cache: hits only, for a bounded time and size, and off at 0."""

from __future__ import annotations

import pytest

from idempay.api import auth
from idempay.api.auth import PrincipalCache
from idempay.domain.model import Principal

ALICE = Principal("mch_a", "alice", is_operator=False)


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: clock[0])
    return clock


def test_a_hit_is_trusted_for_the_ttl_then_looked_up_again(now: list[float]) -> None:
    cache = PrincipalCache(ttl_s=5.0)
    assert cache.get("h1") is None
    cache.put("h1", ALICE, "h1")
    now[0] += 4.9
    assert cache.get("h1") == (ALICE, "h1")
    now[0] += 0.2
    assert cache.get("h1") is None


def test_zero_ttl_keeps_nothing(now: list[float]) -> None:
    cache = PrincipalCache(ttl_s=0.0)
    cache.put("h1", ALICE, "h1")
    assert cache.get("h1") is None


def test_a_full_cache_starts_over_instead_of_growing(now: list[float]) -> None:
    cache = PrincipalCache(ttl_s=60.0, max_entries=3)
    for n in range(3):
        cache.put(f"h{n}", ALICE, f"h{n}")
    assert all(cache.get(f"h{n}") for n in range(3))
    cache.put("h3", ALICE, "h3")
    assert cache.get("h0") is None
    assert cache.get("h3") == (ALICE, "h3")
