"""Settings from the environment (API.md, Configuration), read once at start."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

DEFAULT_CHANNELS = {
    "simbank": {
        "kind": "simbank",
        "base_url": "http://127.0.0.1:8765",
        "secret": "simbank-dev-secret",
    }
}


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Settings:
    database_url: str = "sqlite:///./idempay.db"
    redis_url: str | None = None
    max_amount: int = 100_000_000_000
    channels: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: DEFAULT_CHANNELS)
    public_url: str = "http://127.0.0.1:8000"
    channel_timeout_s: float = 10.0  # the deadline of one channel call
    stale_pending_s: float = 30.0  # a PENDING instruction older than this is treated as UNKNOWN
    idempotency_ttl_s: int = 24 * 3600
    max_body_bytes: int = 64 * 1024
    log_format: str = "auto"  # auto | json | console
    # the worker (docs/operations.md)
    resolve_backoff_s: tuple[float, ...] = (2, 5, 10, 30, 60, 120, 300, 600, 900)
    max_queries: int = 20
    not_found_grace_s: float = 30.0
    worker_lease_s: float = 60.0
    worker_poll_s: float = 1.0
    redis_deadline_ms: int = 50  # a front-lock call slower than this proceeds without the lock
    lock_ttl_ms: int = 15_000
    # connections per process: for transactions (half again on bursts), half as many for reads
    db_pool_size: int = 10
    auth_cache_s: float = 5.0  # how long a process trusts an API key it has looked up
    reconcile_at: time = time(0, 30)  # UTC: the worker reconciles yesterday after this time

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            database_url=env.get("IDEMPAY_DATABASE_URL", d.database_url),
            redis_url=env.get("IDEMPAY_REDIS_URL") or None,
            max_amount=_int(env, "IDEMPAY_MAX_AMOUNT", d.max_amount, hi=2**63 - 1),
            channels=_channels(env.get("IDEMPAY_CHANNELS")),
            public_url=env.get("IDEMPAY_PUBLIC_URL", d.public_url).rstrip("/"),
            channel_timeout_s=_int(env, "IDEMPAY_CHANNEL_TIMEOUT_MS", 10_000) / 1000,
            stale_pending_s=_int(env, "IDEMPAY_STALE_PENDING_MS", 30_000) / 1000,
            idempotency_ttl_s=_int(env, "IDEMPAY_IDEMPOTENCY_TTL_S", d.idempotency_ttl_s),
            max_body_bytes=_int(env, "IDEMPAY_MAX_BODY_BYTES", d.max_body_bytes),
            log_format=env.get("IDEMPAY_LOG_FORMAT", d.log_format),
            resolve_backoff_s=_backoff(env.get("IDEMPAY_RESOLVE_BACKOFF_S"), d.resolve_backoff_s),
            max_queries=_int(env, "IDEMPAY_MAX_QUERIES", d.max_queries),
            not_found_grace_s=_int(env, "IDEMPAY_NOT_FOUND_GRACE_MS", 30_000) / 1000,
            worker_lease_s=_int(env, "IDEMPAY_WORKER_LEASE_MS", 60_000) / 1000,
            worker_poll_s=_int(env, "IDEMPAY_WORKER_POLL_MS", 1_000) / 1000,
            redis_deadline_ms=_int(env, "IDEMPAY_REDIS_DEADLINE_MS", d.redis_deadline_ms),
            lock_ttl_ms=_int(env, "IDEMPAY_LOCK_TTL_MS", d.lock_ttl_ms),
            db_pool_size=_int(env, "IDEMPAY_DB_POOL_SIZE", d.db_pool_size, hi=1000),
            auth_cache_s=_int(env, "IDEMPAY_AUTH_CACHE_MS", 5_000, hi=3_600_000) / 1000,
            reconcile_at=_time(env.get("IDEMPAY_RECONCILE_AT"), d.reconcile_at),
        )


def _int(env: Mapping[str, str], name: str, default: int, hi: int = 2**62) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if not 1 <= value <= hi:
        raise ConfigError(f"{name} must be between 1 and {hi}")
    return value


def _time(raw: str | None, default: time) -> time:
    if not raw:
        return default
    try:
        return datetime.strptime(raw, "%H:%M").time()
    except ValueError:
        raise ConfigError("IDEMPAY_RECONCILE_AT must be HH:MM (UTC)") from None


def _backoff(raw: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    if not raw:
        return default
    try:
        steps = tuple(float(x) for x in raw.split(","))
    except ValueError:
        raise ConfigError("IDEMPAY_RESOLVE_BACKOFF_S must be comma-separated seconds") from None
    if not steps or any(s <= 0 for s in steps):
        raise ConfigError("IDEMPAY_RESOLVE_BACKOFF_S needs at least one positive step")
    return steps


def _channels(raw: str | None) -> Mapping[str, Mapping[str, Any]]:
    if not raw:
        return DEFAULT_CHANNELS
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"IDEMPAY_CHANNELS is not JSON: {e}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) and "kind" in v for k, v in value.items()
    ):
        raise ConfigError('IDEMPAY_CHANNELS must map names to {"kind": ..., ...}')
    return value
