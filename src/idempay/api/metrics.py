"""Prometheus metrics of one API process: requests by route template and status, latencies,
payments by status, duplicates stopped by layer, channel calls by outcome, and the front lock's
acquisitions and degraded calls (read from the lock at scrape time)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from idempay.domain.model import PaymentView

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """One registry per app, so many apps (tests) can live in one process."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "idempay_http_requests",
            "HTTP requests answered, by route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "idempay_http_request_duration_seconds",
            "Time to answer an HTTP request.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.payments = Counter(
            "idempay_payments",
            "Payments created or retried here, by the status they were answered with.",
            ["status"],
            registry=r,
        )
        self.duplicates = Counter(
            "idempay_duplicates_stopped",
            "Repeated requests answered without doing the work "
            "again, by the layer that stopped them.",
            ["layer"],
            registry=r,
        )
        self.channel_calls = Counter(
            "idempay_channel_calls",
            "Channel calls made while answering a request, by the outcome recorded for them.",
            ["channel", "outcome"],
            registry=r,
        )
        self.charge_latency = Histogram(
            "idempay_charge_duration_seconds",
            "Time from the first write of an attempt to its "
            "recorded outcome (channel call included).",
            ["channel"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

        self.callbacks = Counter(
            "idempay_callbacks",
            "Channel callbacks received, by what became of them (APPLIED, "
            "NOOP, DUPLICATE, DISCREPANCY, REJECTED).",
            ["channel", "result"],
            registry=r,
        )
        self.resolutions = Counter(
            "idempay_resolutions",
            "Outcomes found for instructions after their own answer, by "
            "source (callback, operator; the worker counts query).",
            ["source"],
            registry=r,
        )

    def callback(self, channel: str, result: str) -> None:
        self.callbacks.labels(channel, result).inc()
        if result == "APPLIED":
            self.resolutions.labels("callback").inc()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def duplicate(self, layer: str) -> None:
        self.duplicates.labels(layer).inc()

    def attempt(self, view: PaymentView, seconds: float) -> None:
        """A new attempt was sent (charge or retry): count it and the outcome of its call."""
        p = view.payment
        self.payments.labels(p.status).inc()
        self.charge_latency.labels(p.channel).observe(seconds)
        if view.instructions:
            self.channel_calls.labels(p.channel, view.instructions[-1].status).inc()

    def render(self, lock: LockStats | None = None) -> bytes:
        """The registry's metrics, plus the front lock's counters when `lock` is given."""
        text = generate_latest(self.registry)
        if lock is None:
            return text
        scrape = CollectorRegistry()
        scrape.register(FrontLockCollector(lock))
        return text + generate_latest(scrape)


class LockStats(Protocol):
    """What the front lock (locks.py) counts: calls that went without Redis, acquires by result
    (acquired, busy, unavailable)."""

    @property
    def degraded(self) -> int: ...

    @property
    def acquisitions(self) -> Mapping[str, int]: ...


class FrontLockCollector(Collector):
    """Reads the lock's own counters at each scrape, so nothing has to be kept in step."""

    def __init__(self, lock: LockStats) -> None:
        self.lock = lock

    def collect(self) -> Iterator[Metric]:
        degraded = CounterMetricFamily(
            "idempay_front_lock_degraded",
            "Front-lock calls (acquire or release) that went "
            "without Redis: unreachable, failing or slower than IDEMPAY_REDIS_DEADLINE_MS.",
        )
        degraded.add_metric([], self.lock.degraded)
        yield degraded
        acquisitions = CounterMetricFamily(
            "idempay_front_lock_acquisitions",
            "Front-lock acquires, by result: acquired, busy "
            "(another request holds the key), unavailable (went on without the lock).",
            labels=["result"],
        )
        for result, count in self.lock.acquisitions.items():
            acquisitions.add_metric([result], count)
        yield acquisitions
