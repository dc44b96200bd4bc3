"""Every fault knob of `PUT /_sim/faults`: what it does to the simulator's ledger and what the
client (the adapter, or a plain HTTP client) sees."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from idempay.channels.simbank import SimbankChannel
from idempay.domain.errors import OutcomeUnknown
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelStatus
from tests.channels.harness import new_op
from tests.channels.receiver import Receiver
from tests.simbank_proc import SimbankProcess

S = ChannelStatus


def statuses(sim: SimbankProcess, request_id: str) -> list[str]:
    return [e["status"] for e in sim.executions(request_id)]


async def test_drop_response_executes_then_the_adapter_sees_outcome_unknown(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    simbank.faults(drop_response_rate=1)
    op = new_op()
    with pytest.raises(OutcomeUnknown) as caught:
        await adapter.execute(op)
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert statuses(simbank, op.request_id) == ["SUCCESS"]


async def test_drop_response_closes_the_connection_without_any_http_answer(
    simbank: SimbankProcess,
) -> None:
    simbank.faults(drop_response_rate=1)
    body = {"request_id": "req_drop", "payment_ref": "pay_1", "amount": 100, "currency": "CNY"}
    async with httpx.AsyncClient(base_url=simbank.url) as client:
        with pytest.raises(httpx.TransportError) as caught:
            await client.post("/bank/pay", json=body)
    assert not isinstance(caught.value, httpx.TimeoutException)  # closed at once, not a 5xx
    assert statuses(simbank, "req_drop") == ["SUCCESS"]


async def test_timeout_executes_and_holds_the_answer_past_the_clients_deadline(
    simbank: SimbankProcess,
) -> None:
    simbank.faults(timeout_rate=1, timeout_hold_ms=800)
    op = new_op()
    impatient = SimbankChannel("simbank", simbank.url, simbank.secret, timeout_s=0.2)
    try:
        with pytest.raises(OutcomeUnknown) as caught:
            await impatient.execute(op)
    finally:
        await impatient.aclose()
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert statuses(simbank, op.request_id) == ["SUCCESS"]
    body = {"request_id": "req_patient", "payment_ref": "pay_1", "amount": 1, "currency": "CNY"}
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=simbank.url, timeout=5) as patient:
        answer = await patient.post("/bank/pay", json=body)
    assert answer.status_code == 200 and time.monotonic() - started >= 0.75


async def test_error_answers_503_without_executing(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    simbank.faults(error_rate=1)
    op = new_op()
    with pytest.raises(OutcomeUnknown) as caught:
        await adapter.execute(op)
    cause = caught.value.__cause__
    assert isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code == 503
    assert simbank.ledger() == []
    assert (await adapter.query(OpKind.PAY, op.request_id)).status is S.NOT_FOUND


async def test_decline_executes_as_a_business_failure_with_a_reason(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    simbank.faults(decline_rate=1)
    op = new_op()
    answer = await adapter.execute(op)
    assert (answer.status, answer.reason) == (S.FAILED, "INSUFFICIENT_FUNDS")
    assert statuses(simbank, op.request_id) == ["FAILED"]


async def test_latency_delays_every_channel_answer(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    op = new_op()
    started = time.monotonic()
    await adapter.execute(op)
    assert time.monotonic() - started < 0.3
    simbank.faults(latency_ms=400)
    for call in (adapter.execute(new_op()), adapter.query(OpKind.PAY, op.request_id)):
        started = time.monotonic()
        assert (await call).status is S.SUCCESS
        assert time.monotonic() - started >= 0.38


async def test_async_answers_processing_then_settles_visible_to_query_and_by_callback(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    simbank.faults(async_rate=1, async_settle_ms=300)
    op = new_op(notify_url=receiver.url)
    assert (await adapter.execute(op)).status is S.PROCESSING
    assert (await adapter.query(OpKind.PAY, op.request_id)).status is S.PROCESSING
    assert statuses(simbank, op.request_id) == ["PROCESSING"]
    [delivery] = await receiver.wait_for(1)
    assert delivery.json["status"] == "SUCCESS"
    assert (await adapter.query(OpKind.PAY, op.request_id)).status is S.SUCCESS
    assert statuses(simbank, op.request_id) == ["SUCCESS"]


async def test_async_and_decline_settle_as_failed(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    simbank.faults(async_rate=1, decline_rate=1, async_settle_ms=100)
    op = new_op(notify_url=receiver.url)
    assert (await adapter.execute(op)).status is S.PROCESSING
    [delivery] = await receiver.wait_for(1)
    assert (delivery.json["status"], delivery.json["reason"]) == ("FAILED", "INSUFFICIENT_FUNDS")
    assert (await adapter.query(OpKind.PAY, op.request_id)).status is S.FAILED


async def test_a_final_operation_is_announced_by_exactly_one_signed_callback(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    op = new_op(OpKind.SPLIT, notify_url=receiver.url)
    answer = await adapter.execute(op)
    [delivery] = await receiver.wait_for(1)
    await asyncio.sleep(0.7)
    assert len(receiver.deliveries) == 1
    body = delivery.json
    assert set(body) >= {
        "notify_id",
        "request_id",
        "kind",
        "payment_ref",
        "status",
        "amount",
        "currency",
        "channel_txn_id",
        "timestamp",
        "receiver_id",
    }
    assert (body["request_id"], body["kind"], body["receiver_id"]) == (
        op.request_id,
        "SPLIT",
        "distributor-7",
    )
    assert body["channel_txn_id"] == answer.channel_txn_id
    assert delivery.headers["x-simbank-timestamp"] == str(body["timestamp"])
    assert len(delivery.headers["x-simbank-signature"]) == 64


async def test_callback_duplicate_delivers_the_same_notify_id_twice(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    simbank.faults(callback_duplicate_rate=1)
    await adapter.execute(new_op(notify_url=receiver.url))
    first, second = await receiver.wait_for(2)
    assert first.json["notify_id"] == second.json["notify_id"]
    assert first.json["request_id"] == second.json["request_id"]


async def test_callback_delay_holds_back_the_first_delivery(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    simbank.faults(callback_delay_ms=700)
    started = time.monotonic()
    await adapter.execute(new_op(notify_url=receiver.url))
    [delivery] = await receiver.wait_for(1)
    assert delivery.at - started >= 0.65


async def test_callback_loss_never_delivers_but_the_operation_executed(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    simbank.faults(callback_loss_rate=1)
    op = new_op(notify_url=receiver.url)
    assert (await adapter.execute(op)).status is S.SUCCESS
    await asyncio.sleep(1.0)
    assert receiver.deliveries == []
    assert statuses(simbank, op.request_id) == ["SUCCESS"]


async def test_a_callback_not_acknowledged_is_redelivered_after_a_backoff(
    simbank: SimbankProcess, adapter: SimbankChannel, receiver: Receiver
) -> None:
    receiver.fail_first = 1
    await adapter.execute(new_op(notify_url=receiver.url))
    first, second = await receiver.wait_for(2, timeout_s=5)
    assert first.json["notify_id"] == second.json["notify_id"]
    assert second.at - first.at >= 0.45


async def test_the_same_seed_gives_the_same_fault_decisions(simbank: SimbankProcess) -> None:
    knobs = {"error_rate": 0.3, "decline_rate": 0.3, "async_rate": 0.3, "async_settle_ms": 50}

    async def run(seed: int) -> list[str]:
        simbank.reset()
        simbank.faults(seed=seed, **knobs)
        seen = []
        async with httpx.AsyncClient(base_url=simbank.url) as client:
            for i in range(24):
                body = {
                    "request_id": f"req_{i}",
                    "payment_ref": "pay_1",
                    "amount": 100,
                    "currency": "CNY",
                }
                answer = await client.post("/bank/pay", json=body)
                seen.append(str(answer.status_code) if answer.is_error else answer.json()["status"])
        return seen

    first, again, other = await run(7), await run(7), await run(8)
    assert first == again
    assert first != other
    assert {"503", "FAILED", "PROCESSING", "SUCCESS"} <= set(first)


async def test_many_concurrent_operations_each_execute_once(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    simbank.faults(latency_ms=50)
    ops = [new_op() for _ in range(300)]
    answers = await asyncio.gather(*(adapter.execute(op) for op in ops))
    again = await asyncio.gather(*(adapter.execute(op) for op in ops[:50]))
    assert {a.status for a in [*answers, *again]} == {S.SUCCESS}
    assert len(simbank.ledger()) == 300
