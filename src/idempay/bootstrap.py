"""The composition root: the one place that builds engine, store, channels, lock and services."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from idempay.clock import SystemClock
from idempay.config import ConfigError, Settings
from idempay.domain.model import new_id
from idempay.domain.ports import Channel, Clock
from idempay.services.payments import PaymentPolicy, Payments
from idempay.storage import migrate
from idempay.storage.engine import create_engine
from idempay.storage.store import SqlStore


@dataclass
class Container:
    settings: Settings
    clock: Clock
    engine: AsyncEngine
    store: SqlStore
    channels: dict[str, Channel]
    payments: Payments
    _closers: list[Any] = field(default_factory=list)

    async def aclose(self) -> None:
        for closer in self._closers:
            await closer()
        await self.engine.dispose()


def build_channel(name: str, conf: dict[str, Any], settings: Settings) -> Channel:
    kind = conf.get("kind")
    if kind == "scripted":
        from idempay.channels.scripted import ScriptedChannel

        return ScriptedChannel(name)
    if kind == "simbank":
        from idempay.channels.simbank import SimbankChannel

        return SimbankChannel.from_settings(name, conf, settings)
    raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r} has unknown kind {kind!r}")


async def build(
    settings: Settings,
    *,
    clock: Clock | None = None,
    channels: dict[str, Channel] | None = None,
    run_migrations: bool = True,
    pool_size: int = 10,
    null_pool: bool = False,
) -> Container:
    clock = clock or SystemClock()
    engine = create_engine(settings.database_url, pool_size=pool_size, null_pool=null_pool)
    if run_migrations:
        await migrate.upgrade(engine)
    store = SqlStore(engine, clock)
    if channels is None:
        channels = {n: build_channel(n, dict(c), settings) for n, c in settings.channels.items()}
    policy = PaymentPolicy(
        max_amount=settings.max_amount,
        channel_timeout_s=settings.channel_timeout_s,
        stale_pending_s=settings.stale_pending_s,
        public_url=settings.public_url,
    )
    container = Container(
        settings, clock, engine, store, channels, Payments(store, channels, clock, policy)
    )
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
