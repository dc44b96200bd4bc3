"""The simulator's control endpoints: `PUT/GET /_sim/faults` (a whole set, validated),
`GET /_sim/ledger` (the ground truth, oldest first) and `POST /_sim/reset`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from idempay.channels.simbank import SimbankChannel
from idempay.domain.model import OpKind
from tests.channels.harness import new_op
from tests.simbank_proc import SimbankProcess

DEFAULTS = {
    "drop_response_rate": 0.0,
    "timeout_rate": 0.0,
    "timeout_hold_ms": 30000,
    "error_rate": 0.0,
    "decline_rate": 0.0,
    "latency_ms": 0,
    "callback_duplicate_rate": 0.0,
    "callback_delay_ms": 0,
    "callback_loss_rate": 0.0,
    "async_rate": 0.0,
    "async_settle_ms": 300,
    "idempotency": True,
    "seed": None,
}


def put(sim: SimbankProcess, body: Any) -> httpx.Response:
    return httpx.put(f"{sim.url}/_sim/faults", json=body)


def test_get_faults_answers_the_defaults_with_every_knob(simbank: SimbankProcess) -> None:
    assert httpx.get(f"{simbank.url}/_sim/faults").json() == DEFAULTS


def test_put_faults_replaces_the_whole_set_and_answers_it(simbank: SimbankProcess) -> None:
    first = put(simbank, {"error_rate": 0.5, "latency_ms": 10, "seed": 3})
    second = put(simbank, {"idempotency": False})
    assert first.status_code == 200
    assert first.json() == {**DEFAULTS, "error_rate": 0.5, "latency_ms": 10, "seed": 3}
    assert second.json() == {**DEFAULTS, "idempotency": False}
    assert httpx.get(f"{simbank.url}/_sim/faults").json() == second.json()


@pytest.mark.parametrize(
    "body",
    [
        {"lightning_rate": 0.1},
        {"error_rate": 1.5},
        {"error_rate": -0.1},
        {"error_rate": "0.5"},
        {"error_rate": True},
        {"latency_ms": 1.5},
        {"latency_ms": -1},
        {"idempotency": "yes"},
        {"seed": "abc"},
        [],
    ],
)
def test_a_bad_fault_set_is_400_and_changes_nothing(simbank: SimbankProcess, body: Any) -> None:
    put(simbank, {"decline_rate": 0.25})
    answer = put(simbank, body)
    assert answer.status_code == 400
    assert answer.json()["code"] == "INVALID_REQUEST" and answer.json()["message"]
    assert httpx.get(f"{simbank.url}/_sim/faults").json()["decline_rate"] == 0.25


async def test_the_ledger_lists_every_execution_oldest_first_in_the_documented_shape(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    pay, refund = new_op(), new_op(OpKind.REFUND, amount=500)
    await adapter.execute(pay)
    await adapter.execute(refund)
    ledger = simbank.ledger()
    assert [e["request_id"] for e in ledger] == [pay.request_id, refund.request_id]
    assert set(ledger[0]) >= {
        "request_id",
        "kind",
        "payment_ref",
        "amount",
        "currency",
        "status",
        "executed_at",
    }
    assert (ledger[1]["kind"], ledger[1]["amount"], ledger[1]["payment_ref"]) == (
        "REFUND",
        500,
        refund.payment_ref,
    )
    assert simbank.ledger(payment_ref=pay.payment_ref) == [ledger[0]]


async def test_reset_empties_the_ledger_and_closed_ids_and_restores_default_faults(
    simbank: SimbankProcess, adapter: SimbankChannel
) -> None:
    await adapter.execute(new_op())
    await adapter.close(OpKind.PAY, "req_closed")
    simbank.faults(error_rate=0.5)
    simbank.reset()
    assert simbank.ledger() == []
    assert httpx.get(f"{simbank.url}/_sim/faults").json() == DEFAULTS
    assert (await adapter.query(OpKind.PAY, "req_closed")).status.value == "NOT_FOUND"
