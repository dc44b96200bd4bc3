"""Settlement gauges read from the database at scrape time, so every API node reports the same
truth: unresolved instructions by age, open review items, webhook backlog and delivery lag."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from idempay.storage.store import SqlStore

AGES = ("1m", "15m", "1h", "24h", "older")


class SettlementGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.unresolved = Gauge(
            "idempay_unresolved_instructions",
            "Instructions whose outcome is not known yet (PENDING, PROCESSING, UNKNOWN), by "
            "status and age (under 1m, 15m, 1h, 24h, or older).",
            ["status", "age"],
            registry=registry,
        )
        self.reviews_open = Gauge(
            "idempay_reviews_open",
            "Open review items (待人工确认), by kind.",
            ["kind"],
            registry=registry,
        )
        self.webhooks_pending = Gauge(
            "idempay_webhooks_pending", "Webhook events not delivered yet.", registry=registry
        )
        self.webhook_lag = Gauge(
            "idempay_webhook_delivery_lag_seconds",
            "Age of the oldest webhook event not delivered yet (0 when none).",
            registry=registry,
        )

    async def refresh(self, store: SqlStore) -> None:
        stats = await store.settlement_stats()
        self.unresolved.clear()
        for (status, age), n in stats.unresolved.items():
            self.unresolved.labels(status, age).set(n)
        self.reviews_open.clear()
        for kind, n in stats.reviews_open.items():
            self.reviews_open.labels(kind).set(n)
        self.webhooks_pending.set(stats.webhooks_pending)
        self.webhook_lag.set(stats.webhook_lag_s)
