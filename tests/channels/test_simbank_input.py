"""Bad input to the simulator: a 4xx with a clear error naming what is wrong, nothing executed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.simbank_proc import SimbankProcess

GOOD = {"request_id": "req_in_1", "payment_ref": "pay_1", "amount": 19900, "currency": "CNY"}


def without(field: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != field}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/bank/pay", json.dumps(without("amount")), "amount"),
        ("/bank/pay", json.dumps(without("request_id")), "request_id"),
        ("/bank/pay", json.dumps(without("payment_ref")), "payment_ref"),
        ("/bank/pay", json.dumps(without("currency")), "currency"),
        ("/bank/pay", json.dumps({**GOOD, "amount": 199.0}), "amount"),
        ("/bank/pay", json.dumps(GOOD).replace("19900", "1.99e4"), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "amount": "19900"}), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "amount": True}), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "amount": 0}), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "amount": -5}), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "amount": 2**63}), "amount"),
        ("/bank/pay", json.dumps({**GOOD, "currency": "cny"}), "currency"),
        ("/bank/pay", json.dumps({**GOOD, "request_id": "has space"}), "request_id"),
        ("/bank/pay", json.dumps({**GOOD, "request_id": "x" * 65}), "request_id"),
        ("/bank/pay", json.dumps({**GOOD, "surprise": 1}), "surprise"),
        ("/bank/pay", json.dumps({**GOOD, "receiver_id": "r1"}), "receiver_id"),
        ("/bank/pay", json.dumps({**GOOD, "notify_url": "ftp://x"}), "notify_url"),
        ("/bank/split", json.dumps(GOOD), "receiver_id"),
        ("/bank/pay", "not json", None),
        ("/bank/pay", "[1, 2]", None),
    ],
)
def test_a_bad_operation_is_400_naming_the_field_and_executes_nothing(
    simbank: SimbankProcess, path: str, body: str, field: str | None
) -> None:
    answer = httpx.post(
        simbank.url + path, content=body, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400
    problem = answer.json()
    assert problem["code"] == "INVALID_REQUEST" and problem["message"]
    assert problem.get("field") == field
    assert simbank.ledger() == []


def test_a_query_of_an_unknown_request_id_is_404_not_found(simbank: SimbankProcess) -> None:
    answer = httpx.get(f"{simbank.url}/bank/pay/req_unknown")
    assert answer.status_code == 404
    assert answer.json()["code"] == "NOT_FOUND" and "req_unknown" in answer.json()["message"]
    assert simbank.ledger() == []


def test_a_query_of_a_pay_as_a_refund_is_404(simbank: SimbankProcess) -> None:
    httpx.post(f"{simbank.url}/bank/pay", json=GOOD).raise_for_status()
    assert httpx.get(f"{simbank.url}/bank/refund/{GOOD['request_id']}").status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/bank/pay/bad%20id", 400, "INVALID_REQUEST"),
        ("POST", "/bank/pay/bad%20id/close", 400, "INVALID_REQUEST"),
        ("GET", "/bank/statement?date=30-11-2026", 400, "INVALID_REQUEST"),
        ("GET", "/bank/statement", 400, "INVALID_REQUEST"),
        ("POST", "/bank/wire", 404, "NO_SUCH_ENDPOINT"),
        ("DELETE", "/_sim/ledger", 404, "NO_SUCH_ENDPOINT"),
    ],
)
def test_a_bad_path_or_parameter_is_a_4xx_with_a_code(
    simbank: SimbankProcess, method: str, path: str, status: int, code: str
) -> None:
    answer = httpx.request(method, simbank.url + path)
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert simbank.ledger() == []


def test_a_body_over_64_kib_is_413(simbank: SimbankProcess) -> None:
    answer = httpx.post(f"{simbank.url}/bank/pay", content=b"{" + b" " * 70_000 + b"}")
    assert (answer.status_code, answer.json()["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert simbank.ledger() == []


def test_a_request_id_repeated_with_other_parameters_is_409_and_not_executed(
    simbank: SimbankProcess,
) -> None:
    httpx.post(f"{simbank.url}/bank/pay", json=GOOD).raise_for_status()
    answer = httpx.post(f"{simbank.url}/bank/pay", json={**GOOD, "amount": 1})
    assert (answer.status_code, answer.json()["code"]) == (409, "REQUEST_ID_REUSED")
    assert [e["amount"] for e in simbank.ledger()] == [19900]
