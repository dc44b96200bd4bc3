"""Prometheus metrics of one API process: requests by route template and status, latencies,
payments by status, duplicates stopped by layer, channel calls by outcome."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from idempay.domain.model import PaymentView

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """One registry per app, so many apps (tests) can live in one process."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "idempay_http_requests", "HTTP requests answered, by route template and status.",
            ["method", "route", "status"], registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "idempay_http_request_duration_seconds", "Time to answer an HTTP request.",
            ["method", "route"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.payments = Counter(
            "idempay_payments", "Payments created or retried here, by the status they were "
            "answered with.", ["status"], registry=r,
        )  # fmt: skip
        self.duplicates = Counter(
            "idempay_duplicates_stopped", "Repeated requests answered without doing the work "
            "again, by the layer that stopped them.", ["layer"], registry=r,
        )  # fmt: skip
        self.channel_calls = Counter(
            "idempay_channel_calls", "Channel calls made while answering a request, by the "
            "outcome recorded for them.", ["channel", "outcome"], registry=r,
        )  # fmt: skip
        self.charge_latency = Histogram(
            "idempay_charge_duration_seconds", "Time from the first write of an attempt to its "
            "recorded outcome (channel call included).", ["channel"], buckets=LATENCY_BUCKETS,
            registry=r,
        )  # fmt: skip

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
