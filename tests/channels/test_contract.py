"""The channel contract: what every Channel (the in-process ScriptedChannel and the simbank
adapter against a real `idempay simbank` process) must do, whatever it is built on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from idempay.channels.errors import InvalidSignature
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelStatus, StatementLine
from idempay.simbank.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.channels.harness import Harness, outcome

S = ChannelStatus


@pytest.mark.parametrize("kind", list(OpKind))
async def test_execute_then_query_answers_the_same_status(harness: Harness, kind: OpKind) -> None:
    op = harness.op(kind)
    answer = await harness.channel.execute(op)
    queried = await harness.channel.query(kind, op.request_id)
    assert answer.status is S.SUCCESS
    assert (queried.request_id, queried.status) == (op.request_id, S.SUCCESS)
    assert (queried.amount, queried.currency) == (op.amount, op.currency)
    assert queried.channel_txn_id == answer.channel_txn_id is not None
    assert harness.executions(op.request_id) == [(kind.value, "SUCCESS")]


async def test_query_of_a_request_id_never_received_is_not_found(harness: Harness) -> None:
    answer = await harness.channel.query(OpKind.PAY, "req_never_sent")
    assert (answer.request_id, answer.status) == ("req_never_sent", S.NOT_FOUND)


async def test_a_closed_request_id_never_executes_afterwards(harness: Harness) -> None:
    op = harness.op()
    closed = await harness.channel.close(OpKind.PAY, op.request_id)
    late = await outcome(harness.channel, op)
    assert closed.status is S.CLOSED
    assert late.status is S.FAILED
    assert (await harness.channel.query(OpKind.PAY, op.request_id)).status is S.FAILED
    assert harness.executions(op.request_id) == []


async def test_close_after_execution_answers_the_real_status(harness: Harness) -> None:
    op = harness.op()
    await harness.channel.execute(op)
    answer = await harness.channel.close(OpKind.PAY, op.request_id)
    assert answer.status is S.SUCCESS
    assert (await harness.channel.query(OpKind.PAY, op.request_id)).status is S.SUCCESS


async def test_a_repeated_request_id_answers_the_first_result_without_executing(
    harness: Harness,
) -> None:
    op = harness.op()
    first = await harness.channel.execute(op)
    again = await harness.channel.execute(op)
    assert (again.status, again.channel_txn_id) == (first.status, first.channel_txn_id)
    assert harness.executions(op.request_id) == [("PAY", "SUCCESS")]


async def test_without_idempotency_a_repeated_request_id_executes_again(harness: Harness) -> None:
    harness.set_idempotency(False)
    op = harness.op()
    first = await harness.channel.execute(op)
    again = await harness.channel.execute(op)
    assert first.status is again.status is S.SUCCESS
    assert harness.executions(op.request_id) == [("PAY", "SUCCESS"), ("PAY", "SUCCESS")]


async def test_a_declined_operation_is_failed_and_never_succeeds_later(harness: Harness) -> None:
    harness.decline_from_now()
    op = harness.op()
    answer = await outcome(harness.channel, op)
    queried = await harness.channel.query(OpKind.PAY, op.request_id)
    assert answer.status is S.FAILED and answer.reason
    assert queried.status in (S.FAILED, S.NOT_FOUND)
    assert ("PAY", "SUCCESS") not in harness.executions(op.request_id)


async def test_a_split_names_its_one_receiver_and_a_refund_its_payment(harness: Harness) -> None:
    pay, refund, split = harness.op(), harness.op(OpKind.REFUND), harness.op(OpKind.SPLIT)
    for op in (pay, refund, split):
        assert (await harness.channel.execute(op)).status is S.SUCCESS
    lines = {line.request_id: line for line in await _statement(harness)}
    assert lines[split.request_id].receiver_id == "distributor-7"
    assert lines[split.request_id].kind is OpKind.SPLIT
    assert (lines[refund.request_id].kind, lines[refund.request_id].payment_ref) == (
        OpKind.REFUND,
        refund.payment_ref,
    )


async def test_the_statement_lists_every_execution_of_the_day(harness: Harness) -> None:
    harness.set_idempotency(False)
    ops = [harness.op(), harness.op(OpKind.REFUND)]
    for op in [*ops, ops[0]]:  # the first one twice: two executions, two lines
        await harness.channel.execute(op)
    lines = [
        line for line in await _statement(harness) if line.request_id in {o.request_id for o in ops}
    ]
    assert [line.request_id for line in lines] == [
        ops[0].request_id,
        ops[1].request_id,
        ops[0].request_id,
    ]
    first = lines[0]
    assert (first.kind, first.payment_ref, first.amount, first.currency, first.status) == (
        OpKind.PAY,
        ops[0].payment_ref,
        19900,
        "CNY",
        S.SUCCESS,
    )
    assert first.channel_txn_id and first.executed_at.tzinfo is not None
    assert lines[0].channel_txn_id != lines[2].channel_txn_id


async def test_a_statement_of_another_day_does_not_list_today(harness: Harness) -> None:
    await harness.channel.execute(harness.op())
    assert await harness.channel.statement(datetime.now(UTC).date() - timedelta(days=3)) == []


async def test_the_callback_of_an_operation_verifies_to_its_outcome(harness: Harness) -> None:
    op = harness.op()
    answer = await harness.channel.execute(op)
    headers, body = await harness.callback_for(op)
    note = harness.channel.verify_callback(headers, body, datetime.now(UTC))
    assert (note.request_id, note.kind, note.status) == (op.request_id, OpKind.PAY, S.SUCCESS)
    assert (note.amount, note.currency, note.payment_ref) == (
        op.amount,
        op.currency,
        op.payment_ref,
    )
    assert note.channel_txn_id == answer.channel_txn_id and note.notify_id


async def test_a_callback_with_an_altered_body_or_stale_timestamp_is_rejected(
    harness: Harness,
) -> None:
    op = harness.op()
    await harness.channel.execute(op)
    headers, body = await harness.callback_for(op)
    now = datetime.now(UTC)
    with pytest.raises(InvalidSignature):
        harness.channel.verify_callback(headers, body.replace(b"SUCCESS", b"FAILED"), now)
    with pytest.raises(InvalidSignature):
        harness.channel.verify_callback(headers, body, now + timedelta(minutes=6))
    unsigned = {k: v for k, v in headers.items() if k.lower() != SIGNATURE_HEADER.lower()}
    assert TIMESTAMP_HEADER.lower() in {k.lower() for k in unsigned}
    with pytest.raises(InvalidSignature):
        harness.channel.verify_callback(unsigned, body, now)


def test_the_callback_acknowledgement_is_200_success(harness: Harness) -> None:
    assert harness.channel.callback_ack() == (200, {"code": "SUCCESS"})


async def _statement(harness: Harness) -> list[StatementLine]:
    """Today's statement (and yesterday's, should the test straddle midnight UTC)."""
    today = datetime.now(UTC).date()
    return [
        *await harness.channel.statement(today - timedelta(days=1)),
        *await harness.channel.statement(today),
    ]
