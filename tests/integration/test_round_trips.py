"""What one request costs the database, counted on every backend: statements, transactions and
pooled checkouts of a keyed first charge and of its replays. The Python process, not the
database, is the limit (bench/README.md), so each round trip is paid for in throughput: these
counts are a contract that a change to the charge path must not quietly break.

Also: log rows and outbox events are buffered in the transaction and written just before its
COMMIT, in order, and never when it rolls back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from idempay import bootstrap
from idempay.api.app import create_app
from idempay.bootstrap import Container
from idempay.domain.states import Entity
from idempay.storage import tables as t

BODY = {"biz_no": "RT_1", "order_no": "O1", "amount": 100, "currency": "CNY", "channel": "scripted"}


@dataclass
class Counts:
    statements: list[str] = field(default_factory=list)
    checkouts: int = 0
    commits: int = 0

    def clear(self) -> None:
        self.statements.clear()
        self.checkouts = self.commits = 0


@pytest.fixture
def counts(container: Container) -> Iterator[Counts]:
    found = Counts()
    engines: set[AsyncEngine] = {container.engine, container.store.reads}

    def checkout(*_: Any) -> None:
        found.checkouts += 1

    def statement(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
        verb = sql.split()[0].upper()
        if verb != "BEGIN":  # SQLite's own BEGIN (IMMEDIATE): in process, not a round trip
            found.statements.append(verb)

    def commit(*_: Any) -> None:
        found.commits += 1

    for engine in engines:
        event.listen(engine.sync_engine.pool, "checkout", checkout)
        event.listen(engine.sync_engine, "before_cursor_execute", statement)
        event.listen(engine.sync_engine, "commit", commit)
    yield found
    for engine in engines:
        event.remove(engine.sync_engine.pool, "checkout", checkout)
        event.remove(engine.sync_engine, "before_cursor_execute", statement)
        event.remove(engine.sync_engine, "commit", commit)


@pytest.fixture
async def api(container: Container) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    _, key = await bootstrap.create_principal(container.store, "acme", operator=False)
    transport = httpx.ASGITransport(app=create_app(container))
    async with httpx.AsyncClient(transport=transport, base_url="http://idempay.test") as client:
        yield client, key


async def test_a_keyed_first_charge_and_its_replays_cost_few_statements(
    api: tuple[httpx.AsyncClient, str], counts: Counts, container: Container
) -> None:
    client, key = api
    warm = {**BODY, "biz_no": "RT_WARM"}
    headers = {"Authorization": f"Bearer {key}"}
    assert (await client.post("/v1/payments", json=warm, headers=headers)).status_code == 201

    counts.clear()
    keyed = {**headers, "Idempotency-Key": "rt-key-1"}
    first = await client.post("/v1/payments", json=BODY, headers=keyed)
    assert first.status_code == 201, first.text
    # the API key is remembered (IDEMPAY_AUTH_CACHE_MS): no principal lookup. Then the key's
    # record and the payment (with its instructions, one join); transaction A: payment,
    # instruction, key claim, both log rows in one INSERT; transaction B: instruction CAS,
    # payment CAS with RETURNING (MariaDB: plus a re-read), log rows, outbox event; the view
    # (one join); the key's answer.
    writes = {"mysql": 13}.get(container.engine.dialect.name, 12)
    assert len(counts.statements) == writes, counts.statements
    assert counts.statements.count("INSERT") == 6, counts.statements
    assert counts.commits == (3 if container.store.autocommit is None else 2)

    # by Idempotency-Key (its stored answer), then by biz_no alone (the payment as it is)
    for replay_headers, status in ((keyed, 201), (headers, 200)):
        counts.clear()
        again = await client.post("/v1/payments", json=BODY, headers=replay_headers)
        assert again.status_code == status, again.text
        assert again.headers["Idempotent-Replayed"] == "true"
        assert counts.statements == ["SELECT"]
        assert counts.checkouts == 1
        assert counts.commits == 0


async def test_logs_and_events_are_written_at_commit_in_order_and_never_on_rollback(
    container: Container, merchant: str
) -> None:
    from idempay.services.payments import ChargeCommand

    cmd = ChargeCommand("RT_2", "O2", 100, "CNY", "scripted")
    result = await container.payments.charge(merchant, cmd)
    payment_id = result.view.payment.id
    logged_before = await container.store.transition_log(Entity.PAYMENT, payment_id)
    events_before = await container.store.events_for(payment_id)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with container.store.begin() as tx:
            await tx.log(Entity.PAYMENT, payment_id, "SUCCESS", "SUCCESS", "one", "test")
            await tx.add_event(merchant, "payment.test", payment_id, {"n": 1})
            raise Boom
    assert await container.store.transition_log(Entity.PAYMENT, payment_id) == logged_before
    assert await container.store.events_for(payment_id) == events_before

    async with container.store.begin() as tx:
        for n in range(3):
            await tx.log(Entity.PAYMENT, payment_id, "SUCCESS", "SUCCESS", f"note {n}", "test")
            await tx.add_event(merchant, f"payment.test{n}", payment_id, {"n": n})
    logged = await container.store.transition_log(Entity.PAYMENT, payment_id)
    assert [r["reason"] for r in logged[len(logged_before) :]] == ["note 0", "note 1", "note 2"]
    events = await container.store.events_for(payment_id)
    kinds = [e["kind"] for e in events[len(events_before) :]]
    assert kinds == ["payment.test0", "payment.test1", "payment.test2"]
    async with container.engine.connect() as conn:
        total = (await conn.execute(select(func.count()).select_from(t.transitions))).scalar()
    assert total == len(logged) + 2  # the instruction's two rows of the charge


async def test_the_api_key_cache_keeps_hits_only(container: Container) -> None:
    """An unknown key is looked up every time (a key created after a 401 works at once); a
    known one is not looked up again within IDEMPAY_AUTH_CACHE_MS."""
    transport = httpx.ASGITransport(app=create_app(container))
    headers = {"Authorization": "Bearer not-yet-a-key"}
    async with httpx.AsyncClient(transport=transport, base_url="http://idempay.test") as client:
        assert (await client.get("/v1/payments", headers=headers)).status_code == 401
        await container.store.add_merchant("mch_late", "late", bootstrap.hash_key("not-yet-a-key"))
        assert (await client.get("/v1/payments", headers=headers)).status_code == 200
        lookups = 0

        def count(_c: Any, _cur: Any, sql: str, *_: Any) -> None:
            nonlocal lookups
            lookups += "merchants" in sql

        event.listen(container.store.reads.sync_engine, "before_cursor_execute", count)
        try:
            assert (await client.get("/v1/payments", headers=headers)).status_code == 200
        finally:
            event.remove(container.store.reads.sync_engine, "before_cursor_execute", count)
        assert lookups == 0
