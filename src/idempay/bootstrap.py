"""The composition root: the one place that builds engine, store, channels, lock and services."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from idempay.clock import SystemClock
from idempay.config import ConfigError, Settings
from idempay.domain.model import new_id
from idempay.domain.ports import Channel, Clock
from idempay.locks import NoLock, RedisFrontLock
from idempay.services.callbacks import Callbacks
from idempay.services.idempotency import Idempotency, IdempotencyPolicy
from idempay.services.outbox import Outbox
from idempay.services.payments import Payments
from idempay.services.reconciliation import Reconciliation
from idempay.services.refunds import Refunds
from idempay.services.resolution import ResolutionPolicy, Resolver
from idempay.services.reviews import Reviews
from idempay.services.sending import PaymentPolicy
from idempay.services.splits import Splits
from idempay.storage import migrate
from idempay.storage.engine import create_autocommit_engine, create_engine
from idempay.storage.idempotency import SqlIdempotencyRecords
from idempay.storage.reconciliation import SqlReconciliationStore
from idempay.storage.store import SqlStore
from idempay.storage.work import SqlWorkQueue
from idempay.webhooks import HttpxWebhookSender

# An Idempotency-Key record unanswered for longer than the channel deadline plus this margin
# belongs to a request that died (crash, kill): it no longer blocks its key (409).
IN_FLIGHT_MARGIN_S = 5.0


@dataclass
class Container:
    settings: Settings
    clock: Clock
    engine: AsyncEngine
    store: SqlStore
    channels: dict[str, Channel]
    payments: Payments
    lock: NoLock | RedisFrontLock = field(default_factory=NoLock)
    _closers: list[Any] = field(default_factory=list)
    idempotency: Idempotency = field(init=False)
    refunds: Refunds = field(init=False)
    splits: Splits = field(init=False)
    callbacks: Callbacks = field(init=False)
    reviews: Reviews = field(init=False)
    reconciliation: Reconciliation = field(init=False)

    def __post_init__(self) -> None:
        policy = IdempotencyPolicy(
            ttl_s=float(self.settings.idempotency_ttl_s),
            in_flight_s=self.settings.channel_timeout_s + IN_FLIGHT_MARGIN_S,
        )
        self.idempotency = Idempotency(SqlIdempotencyRecords(self.store), self.clock, policy)
        money = (self.store, self.channels, self.clock, self.payments.policy)
        self.refunds = Refunds(*money, lock=self.lock)
        self.splits = Splits(*money, lock=self.lock)
        self.callbacks = Callbacks(self.store)
        self.reviews = Reviews(self.store)
        books = SqlReconciliationStore(self.store)
        self.reconciliation = Reconciliation(
            self.store, books, self.channels, self.clock, self.refunds
        )

    async def aclose(self) -> None:
        for closer in self._closers:
            await closer()
        await self.engine.dispose()
        if self.store.autocommit is not None:
            await self.store.autocommit.dispose()


def build_lock(settings: Settings) -> NoLock | RedisFrontLock:
    """The front lock: Redis when IDEMPAY_REDIS_URL is set, otherwise none."""
    if settings.redis_url:
        return RedisFrontLock(settings.redis_url, deadline_ms=settings.redis_deadline_ms)
    return NoLock()


def build_channel(name: str, conf: dict[str, Any], settings: Settings) -> Channel:
    kind = conf.get("kind")
    if kind == "scripted":
        return _scripted_channel(name, conf)
    if kind == "simbank":
        from idempay.channels.simbank import SimbankChannel

        return SimbankChannel.from_settings(name, conf, settings)
    raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r} has unknown kind {kind!r}")


def _scripted_channel(name: str, conf: dict[str, Any]) -> Channel:
    """The in-process fake, for tests and sandboxes: {"kind": "scripted", "default": "SUCCEED"
    | "DECLINE" | "PENDING" | "HALF_OPEN" | "ERROR" | "REFUSED", "plan": [behaviours answered
    first, in order], "delay_ms": n, "idempotency": true, "ledger_path": "<JSONL file, one line
    per execution>"}."""
    from idempay.channels.scripted import Behavior, ScriptedChannel

    unknown = set(conf) - {"kind", "default", "plan", "delay_ms", "idempotency", "ledger_path"}
    delay_ms = conf.get("delay_ms", 0)
    try:
        default = Behavior(conf.get("default", Behavior.SUCCEED))
        plan = [Behavior(b) for b in conf.get("plan", [])]
    except (ValueError, TypeError) as e:
        raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r}: {e}") from None
    bad_delay = isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float) or delay_ms < 0
    if unknown or bad_delay:
        raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r}: bad scripted settings {conf!r}")
    ledger = conf.get("ledger_path")
    channel = ScriptedChannel(
        name,
        default=default,
        delay_s=delay_ms / 1000,
        idempotency=bool(conf.get("idempotency", True)),
        ledger_path=Path(ledger) if ledger else None,
    )
    channel.plan(*plan)
    return channel


async def build(
    settings: Settings,
    *,
    clock: Clock | None = None,
    channels: dict[str, Channel] | None = None,
    run_migrations: bool = True,
    pool_size: int | None = None,
    null_pool: bool = False,
) -> Container:
    clock = clock or SystemClock()
    size = pool_size or settings.db_pool_size
    engine = create_engine(settings.database_url, pool_size=size, null_pool=null_pool)
    if run_migrations:
        await migrate.upgrade(engine)
    autocommit = create_autocommit_engine(
        settings.database_url, pool_size=size, null_pool=null_pool
    )
    store = SqlStore(engine, clock, autocommit=autocommit)
    if channels is None:
        channels = {n: build_channel(n, dict(c), settings) for n, c in settings.channels.items()}
    policy = PaymentPolicy(
        max_amount=settings.max_amount,
        channel_timeout_s=settings.channel_timeout_s,
        stale_pending_s=settings.stale_pending_s,
        public_url=settings.public_url,
        lock_ttl_ms=settings.lock_ttl_ms,
    )
    lock = build_lock(settings)
    payments = Payments(store, channels, clock, policy, lock)
    container = Container(settings, clock, engine, store, channels, payments, lock=lock)
    container._closers.append(lock.aclose)
    for channel in channels.values():
        aclose = getattr(channel, "aclose", None)
        if aclose is not None:
            container._closers.append(aclose)
    return container


def hash_key(api_key: str) -> str:
    """API keys are 256-bit random tokens, so one SHA-256 is the right hash (no KDF needed)."""
    return hashlib.sha256(api_key.encode()).hexdigest()


async def create_principal(store: SqlStore, name: str, *, operator: bool) -> tuple[str, str]:
    """Create a merchant (or operator) and its key; the key is returned once, stored hashed."""
    prefix = "op" if operator else "mch"
    principal_id = new_id(prefix, store.clock.now())
    api_key = f"{'opk' if operator else 'sk'}_{secrets.token_urlsafe(32)}"
    add = store.add_operator if operator else store.add_merchant
    await add(principal_id, name, hash_key(api_key))
    return principal_id, api_key


@dataclass
class WorkerParts:
    resolver: Resolver
    outbox: Outbox
    sender: HttpxWebhookSender
    queue: SqlWorkQueue


def build_worker(container: Container, worker_id: str) -> WorkerParts:
    """The worker's services over the container's store and channels."""
    s = container.settings
    policy = ResolutionPolicy(
        backoff_s=s.resolve_backoff_s,
        max_queries=s.max_queries,
        not_found_grace_s=s.not_found_grace_s,
        lease_s=s.worker_lease_s,
        query_timeout_s=s.channel_timeout_s,
    )
    queue = SqlWorkQueue(container.store)
    resolver = Resolver(
        container.store, queue, container.channels, container.clock, worker_id, policy
    )
    sender = HttpxWebhookSender()
    return WorkerParts(resolver, Outbox(queue, sender, container.clock), sender, queue)
