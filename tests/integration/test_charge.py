"""The charge path on every database: write ahead, send once, record by CAS, never resend."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from idempay.bootstrap import Container
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.domain.errors import BizNoReused, InvalidRequest, InvalidState, NotFound
from idempay.domain.states import Entity
from idempay.services.payments import ChargeCommand
from idempay.storage import tables as t


def cmd(biz_no: str = "PAY_ORD001", amount: int = 19900, **kw: object) -> ChargeCommand:
    base: dict[str, object] = {
        "biz_no": biz_no,
        "order_no": "ORD001",
        "amount": amount,
        "currency": "CNY",
        "channel": "scripted",
    }
    return ChargeCommand(**{**base, **kw})  # type: ignore[arg-type]


async def count(container: Container, table: t.Table) -> int:
    async with container.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def test_first_charge_succeeds_and_writes_the_instruction_before_sending(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    result = await container.payments.charge(merchant, cmd())
    p, [ins] = result.view.payment, result.view.instructions
    assert (result.created, result.replayed, p.status, ins.status) == (
        True,
        False,
        "SUCCESS",
        "SUCCESS",
    )
    assert [e.request_id for e in channel.executions(p.id)] == [ins.request_id]
    log = await container.store.transition_log(Entity.PAYMENT, p.id)
    assert [(r["from_status"], r["to_status"]) for r in log] == [
        (None, "PROCESSING"),
        ("PROCESSING", "SUCCESS"),
    ]


async def test_a_repeat_answers_the_stored_payment_without_calling_the_channel(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    first = await container.payments.charge(merchant, cmd())
    again = await container.payments.charge(merchant, cmd())
    assert (again.created, again.replayed) == (False, True)
    assert again.view.payment.id == first.view.payment.id
    assert channel.calls == 1


async def test_half_open_channel_leaves_unknown_and_a_repeat_executes_nothing(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.plan(Behavior.HALF_OPEN)
    result = await container.payments.charge(merchant, cmd())
    p, [ins] = result.view.payment, result.view.instructions
    assert (p.status, ins.status) == ("UNKNOWN", "UNKNOWN")
    assert len(channel.executions(p.id)) == 1  # the bank did charge
    again = await container.payments.charge(merchant, cmd())
    assert again.view.payment.status == "UNKNOWN"
    assert channel.calls == 1 and len(channel.executions(p.id)) == 1
    with pytest.raises(InvalidState):
        await container.payments.retry(merchant, "PAY_ORD001")
    assert channel.calls == 1


@pytest.mark.parametrize("behavior", [Behavior.ERROR, Behavior.HALF_OPEN])
async def test_5xx_and_lost_answers_are_unknown_never_failed(
    container: Container, merchant: str, channel: ScriptedChannel, behavior: Behavior
) -> None:
    channel.plan(behavior)
    result = await container.payments.charge(merchant, cmd())
    assert result.view.payment.status == "UNKNOWN"


async def test_a_channel_slower_than_the_deadline_is_unknown(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    container.payments.policy = container.payments.policy.__class__(channel_timeout_s=0.05)
    channel.delay_s = 0.5
    result = await container.payments.charge(merchant, cmd())
    assert result.view.payment.status == "UNKNOWN"
    assert result.view.instructions[0].last_error == "deadline exceeded"


async def test_pending_at_the_channel_keeps_the_payment_processing(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.plan(Behavior.PENDING)
    result = await container.payments.charge(merchant, cmd())
    assert (result.view.payment.status, result.view.instructions[0].status) == (
        "PROCESSING",
        "PROCESSING",
    )
    await container.payments.charge(merchant, cmd())
    assert channel.calls == 1


async def test_decline_fails_and_retry_sends_a_new_request_id(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.plan(Behavior.DECLINE)
    failed = await container.payments.charge(merchant, cmd())
    assert failed.view.payment.status == "FAILED"
    retried = await container.payments.retry(merchant, "PAY_ORD001")
    p, (first, second) = retried.view.payment, retried.view.instructions
    assert (p.status, p.attempt, first.status, second.status) == ("SUCCESS", 2, "FAILED", "SUCCESS")
    assert first.request_id != second.request_id
    assert [e.request_id for e in channel.executions(p.id)] == [second.request_id]


async def test_retry_with_a_new_amount_keeps_the_biz_no_and_logs_the_change(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.plan(Behavior.REFUSED)
    first = await container.payments.charge(merchant, cmd())
    assert first.view.payment.status == "FAILED"
    retried = await container.payments.retry(merchant, "PAY_ORD001", amount=25000)
    assert (retried.view.payment.amount, retried.view.payment.biz_no) == (25000, "PAY_ORD001")
    log = await container.store.transition_log(Entity.PAYMENT, first.view.payment.id)
    assert any("amount changed 19900 -> 25000" in r["reason"] for r in log)
    with pytest.raises(BizNoReused):  # the original amount is now "different parameters"
        await container.payments.charge(merchant, cmd())


@pytest.mark.parametrize(
    "status_behavior", [Behavior.SUCCEED, Behavior.HALF_OPEN, Behavior.PENDING]
)
async def test_retry_and_close_are_refused_outside_failed(
    container: Container, merchant: str, channel: ScriptedChannel, status_behavior: Behavior
) -> None:
    channel.plan(status_behavior)
    await container.payments.charge(merchant, cmd())
    with pytest.raises(InvalidState):
        await container.payments.retry(merchant, "PAY_ORD001")
    with pytest.raises(InvalidState):
        await container.payments.close(merchant, "PAY_ORD001")
    assert channel.calls == 1


async def test_close_from_failed_is_final(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.plan(Behavior.DECLINE)
    await container.payments.charge(merchant, cmd())
    closed = await container.payments.close(merchant, "PAY_ORD001")
    assert closed.payment.status == "CLOSED"
    with pytest.raises(InvalidState):
        await container.payments.retry(merchant, "PAY_ORD001")
    with pytest.raises(InvalidState):
        await container.payments.close(merchant, "PAY_ORD001")


@pytest.mark.parametrize("change", [{"amount": 100}, {"currency": "USD"}, {"order_no": "ORD002"}])
async def test_same_biz_no_with_other_parameters_is_refused_and_writes_nothing(
    container: Container, merchant: str, channel: ScriptedChannel, change: dict[str, object]
) -> None:
    await container.payments.charge(merchant, cmd())
    before = [
        await count(container, tb) for tb in (t.payments, t.instructions, t.transitions, t.outbox)
    ]
    with pytest.raises(BizNoReused) as e:
        await container.payments.charge(merchant, cmd(**change))
    assert e.value.code == "BIZ_NO_REUSED" and set(e.value.fields) == set(change)
    after = [
        await count(container, tb) for tb in (t.payments, t.instructions, t.transitions, t.outbox)
    ]
    assert after == before and channel.calls == 1


@pytest.mark.parametrize(
    "change",
    [
        {"amount": 1.5},
        {"amount": 0},
        {"amount": -5},
        {"amount": 10**12},
        {"amount": True},
        {"currency": "XXX"},
        {"currency": "cny"},
        {"biz_no": "has space"},
        {"biz_no": "x" * 65},
        {"order_no": ""},
        {"channel": "nope"},
    ],
)
async def test_bad_input_is_refused_before_anything_is_written(
    container: Container, merchant: str, channel: ScriptedChannel, change: dict[str, object]
) -> None:
    with pytest.raises(InvalidRequest):
        await container.payments.charge(merchant, cmd(**change))
    assert await count(container, t.payments) == 0 and channel.calls == 0


async def test_biz_no_is_case_sensitive_and_scoped_by_merchant(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    from idempay.bootstrap import create_principal

    other, _ = await create_principal(container.store, "other", operator=False)
    a = await container.payments.charge(merchant, cmd("pay_a"))
    b = await container.payments.charge(merchant, cmd("PAY_A"))
    c = await container.payments.charge(other, cmd("pay_a"))
    assert len({a.view.payment.id, b.view.payment.id, c.view.payment.id}) == 3
    with pytest.raises(NotFound):
        await container.payments.get(other, "PAY_A")


async def test_concurrent_tasks_on_one_biz_no_execute_once(
    container: Container, merchant: str, channel: ScriptedChannel
) -> None:
    channel.delay_s = 0.05
    results = await asyncio.gather(*(container.payments.charge(merchant, cmd()) for _ in range(20)))
    assert len({r.view.payment.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert channel.calls == 1
