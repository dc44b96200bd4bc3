"""Webhooks from the outbox: signed, stable event ids, retried, in order per payment."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import event, func, select

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.storage import tables as t
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


async def test_events_without_a_notify_url_are_skipped_together_and_none_is_lost(
    database_url: str, receiver: Receiver
) -> None:
    clock = ManualClock()
    inner = ScriptedChannel("scripted", default=Behavior.HALF_OPEN)
    c = await build(database_url, Wrapped(inner), clock)
    merchant, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    for i in range(6):
        await c.payments.charge(merchant, cmd(f"PAY_{i}"))
    await c.payments.charge(merchant, cmd("PAY_HOOK", notify_url=receiver.url))
    clock.advance(3)
    parts = bootstrap.build_worker(c, "w")
    await parts.resolver.run_once()  # each payment: payment.unknown, then payment.success
    finishing: list[str] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE OUTBOX SET STATUS"):
            finishing.append(statement)

    for engine in (c.engine, c.store.autocommit):
        if engine is not None:
            event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    rounds = 0
    while await parts.outbox.deliver_due():
        rounds += 1
    assert rounds == 2  # the unknowns, then the successes (in order per payment)
    assert len(finishing) == 2 * (1 + 1)  # per round: the 6 skipped together, the 1 delivered
    for i in range(6):
        payment_id = (await c.payments.get(merchant, f"PAY_{i}")).payment.id
        events = await c.store.events_for(payment_id)
        assert [(e["kind"], e["status"]) for e in events] == [
            ("payment.unknown", "SKIPPED"),
            ("payment.success", "SKIPPED"),
        ]
        assert all(e["attempts"] == 0 and e["last_error"] == "no notify_url" for e in events)
        assert all(e["next_attempt_at"] is None for e in events)
    assert [e["type"] for e in receiver.events()] == ["payment.unknown", "payment.success"]
    async with c.engine.connect() as conn:
        leased = select(func.count()).where(t.outbox.c.lease_until.is_not(None))
        assert (await conn.execute(leased)).scalar_one() == 0
    await parts.sender.aclose()
    await c.aclose()
