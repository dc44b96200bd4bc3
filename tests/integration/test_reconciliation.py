"""Statement reconciliation: one test per class, corrections where safe, reviews elsewhere, and
re-runs that change nothing."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import func, select

from idempay import bootstrap
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import SystemClock
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelOp
from idempay.domain.states import Entity
from idempay.services.reconciliation import Reconciliation
from idempay.services.refunds import Refunds
from idempay.services.sending import PaymentPolicy
from idempay.storage import tables as t
from idempay.storage.reconciliation import SqlReconciliationStore
from tests.integration.settlement_helpers import build, cmd


@pytest.fixture
def inner() -> ScriptedChannel:
    return ScriptedChannel("scripted")


@pytest.fixture
async def c(database_url: str, inner: ScriptedChannel):  # type: ignore[no-untyped-def]
    container = await build(database_url, inner, SystemClock())  # type: ignore[arg-type]
    yield container
    await container.aclose()


@pytest.fixture
async def merchant(c: bootstrap.Container) -> str:
    mid, _ = await bootstrap.create_principal(c.store, "acme", operator=False)
    return mid


def today() -> date:
    return datetime.now(UTC).date()


async def reconcile(c: bootstrap.Container) -> dict[str, object]:
    refunds = Refunds(c.store, c.channels, c.clock, PaymentPolicy(channel_timeout_s=2.0))
    recon = Reconciliation(c.store, SqlReconciliationStore(c.store), c.channels, c.clock, refunds)
    run_id = await recon.start("scripted", today())
    assert run_id is not None
    return await recon.run(run_id, "scripted", today())


async def count(c: bootstrap.Container, table: t.Table, **where: object) -> int:
    q = select(func.count()).select_from(table).where(*(table.c[k] == v for k, v in where.items()))
    async with c.engine.connect() as conn:
        return int((await conn.execute(q)).scalar_one())


def found(run: dict[str, object], cls: str) -> list[dict[str, object]]:
    return [d for d in run["discrepancies"] if d["class"] == cls]  # type: ignore[union-attr, index]


async def test_agreeing_books_match(c: bootstrap.Container, merchant: str) -> None:
    await c.payments.charge(merchant, cmd("PAY_1"))
    run = await reconcile(c)
    assert run["status"] == "DONE"
    assert run["counts"]["MATCH"] == 1 and run["discrepancies"] == []  # type: ignore[index]


async def test_local_unknown_settled_at_the_channel_is_corrected_once(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    inner.plan(Behavior.HALF_OPEN)
    view = (await c.payments.charge(merchant, cmd("PAY_1"))).view
    first = await reconcile(c)
    [d] = found(first, "STATUS_MISMATCH")
    assert d["correction"] == "applied SUCCESS"
    assert (await c.payments.get(merchant, "PAY_1")).payment.status == "SUCCESS"
    log = await c.store.transition_log(Entity.PAYMENT, view.payment.id)
    assert log[-1]["actor"] == f"reconciliation:{first['id']}"
    second = await reconcile(c)
    assert second["counts"] == first["counts"]
    assert len(await c.store.transition_log(Entity.PAYMENT, view.payment.id)) == len(log)
    assert await count(c, t.discrepancies, **{"class": "STATUS_MISMATCH"}) == 1
    assert await count(c, t.reviews) == 0


async def test_channel_failed_where_we_say_success_goes_to_review(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    rid = (await c.payments.charge(merchant, cmd("PAY_1"))).view.instructions[0].request_id
    inner.settle(rid, "FAILED")
    run = await reconcile(c)
    [d] = found(run, "STATUS_MISMATCH")
    assert d["correction"] == "review" and d["local"]["status"] == "SUCCESS"  # type: ignore[index]
    assert await count(c, t.reviews, kind="DISCREPANCY", request_id=rid) == 1
    await reconcile(c)
    assert await count(c, t.reviews) == 1 and await count(c, t.discrepancies) == 1


async def test_an_operation_we_never_wrote_is_missing_local(
    c: bootstrap.Container, inner: ScriptedChannel
) -> None:
    await inner.execute(ChannelOp("req_stranger", OpKind.PAY, "pay_unknown", 500, "CNY"))
    run = await reconcile(c)
    [d] = found(run, "MISSING_LOCAL")
    assert d["request_id"] == "req_stranger" and d["correction"] == "review"
    assert await count(c, t.reviews, kind="DISCREPANCY") == 1


async def test_our_success_absent_from_the_statement_is_missing_at_channel(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    await c.payments.charge(merchant, cmd("PAY_1"))
    inner.ledger.clear()
    run = await reconcile(c)
    [d] = found(run, "MISSING_AT_CHANNEL")
    assert d["local"]["status"] == "SUCCESS" and d["correction"] == "review"  # type: ignore[index]


async def test_another_amount_at_the_channel_is_an_amount_mismatch(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    await c.payments.charge(merchant, cmd("PAY_1"))
    inner.ledger[0] = dataclasses.replace(inner.ledger[0], amount=1)
    run = await reconcile(c)
    [d] = found(run, "AMOUNT_MISMATCH")
    assert d["channel"]["amount"] == 1 and d["correction"] == "review"  # type: ignore[index]
    assert (await c.payments.get(merchant, "PAY_1")).payment.status == "SUCCESS"


async def test_a_duplicate_charge_is_refunded_exactly_once(
    c: bootstrap.Container, merchant: str, inner: ScriptedChannel
) -> None:
    inner.idempotency = False  # a channel whose idempotency failed (seeds/002)
    view = (await c.payments.charge(merchant, cmd("PAY_1"))).view
    ins = view.instructions[0]
    await inner.execute(ChannelOp(ins.request_id, OpKind.PAY, view.payment.id, 19900, "CNY"))
    assert len(inner.executions(view.payment.id)) == 2
    first = await reconcile(c)
    [d] = found(first, "DUPLICATE_CHARGE")
    assert str(d["correction"]).startswith("refund dup-") and str(d["correction"]).endswith(
        "SUCCESS"
    )
    refunds = inner.executions(view.payment.id, kind=OpKind.REFUND)
    assert [r.amount for r in refunds] == [19900]
    payment = (await c.payments.get(merchant, "PAY_1")).payment
    assert (payment.refunded_amount, payment.reserved_amount) == (0, 0)  # not the payment's money
    second = await reconcile(c)
    assert second["counts"]["MATCH"] == first["counts"]["MATCH"] + 1  # type: ignore[index]  # the refund
    assert found(second, "DUPLICATE_CHARGE") == found(first, "DUPLICATE_CHARGE")
    assert len(inner.executions(view.payment.id, kind=OpKind.REFUND)) == 1
    assert await count(c, t.discrepancies, **{"class": "DUPLICATE_CHARGE"}) == 1
