"""Webhooks from the outbox: signed, stable event ids, retried, in order per payment."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from tests.integration.settlement_helpers import Wrapped, build, cmd


class Receiver:
    """A merchant's webhook endpoint on loopback that records what it receives."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_next = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.fail_next:
                    receiver.fail_next -= 1
                    self.send_response(503)
                else:
                    receiver.received.append((dict(self.headers), body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, body in self.received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


async def test_events_are_delivered_signed_in_order_and_retried(
    database_url: str, receiver: Receiver
) -> None:
    clock = ManualClock()
    inner = ScriptedChannel("scripted")
    inner.plan(Behavior.HALF_OPEN)
    c = await build(database_url, Wrapped(inner), clock)
    merchant, api_key = await bootstrap.create_principal(c.store, "acme", operator=False)
    await c.payments.charge(merchant, cmd(notify_url=receiver.url))
    await c.payments.charge(merchant, cmd("PAY_NOHOOK"))  # no notify_url: skipped, not blocking
    clock.advance(3)
    parts = bootstrap.build_worker(c, "w")
    await parts.resolver.run_once()  # UNKNOWN -> SUCCESS
    receiver.fail_next = 1
    assert await parts.outbox.deliver_due() >= 1
    assert receiver.events() == []  # the first attempt got a 503; the success waits behind it
    assert await parts.outbox.deliver_due() == 0  # backoff: not due yet
    clock.advance(6)
    while await parts.outbox.deliver_due():
        pass
    events = receiver.events()
    assert [e["type"] for e in events] == ["payment.unknown", "payment.success"]
    assert all(e["data"]["biz_no"] == "PAY_1" for e in events)  # type: ignore[index]
    headers, body = receiver.received[0]
    ts, sig = (part.split("=", 1)[1] for part in headers["Idempay-Signature"].split(","))
    key = hashlib.sha256(api_key.encode()).hexdigest().encode()
    assert hmac.compare_digest(
        sig, hmac.new(key, f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    )
    assert headers["Idempay-Event-Id"] == events[0]["event_id"]
    await parts.sender.aclose()
    await c.aclose()
