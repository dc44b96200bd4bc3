"""Strict reading of what clients send the simulator: every bad input is a 400 naming the field,
before anything executes. Amounts are integers of minor units, never floats, strings or booleans."""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from idempay.simbank.http import HttpError
from idempay.simbank.ledger import Op

KINDS = {"pay": "PAY", "refund": "REFUND", "split": "SPLIT"}  # path segment -> kind
IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
CURRENCY = re.compile(r"[A-Z]{3}")
MAX_AMOUNT = 2**63 - 1
MAX_URL = 2048


def bad(message: str, field: str | None = None) -> HttpError:
    return HttpError(400, "INVALID_REQUEST", message, field=field)


def json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"body is not JSON: {e}") from None


def identifier(value: object, field: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise bad(f"{field} must match ^[A-Za-z0-9_.:-]{{1,64}}$", field)
    return value


def parse_op(kind: str, raw: bytes) -> Op:
    body = json_body(raw)
    if not isinstance(body, dict):
        raise bad("body must be a JSON object")
    required = {"request_id", "payment_ref", "amount", "currency"} | (
        {"receiver_id"} if kind == "SPLIT" else set()
    )
    unknown = sorted(set(body) - required - {"notify_url"})
    if unknown:
        raise bad(f"unknown field(s): {', '.join(unknown)}", unknown[0])
    missing = sorted(required - set(body))
    if missing:
        raise bad(f"missing field(s): {', '.join(missing)}", missing[0])
    return Op(
        request_id=identifier(body["request_id"], "request_id"),
        kind=kind,
        payment_ref=identifier(body["payment_ref"], "payment_ref"),
        amount=_amount(body["amount"]),
        currency=_currency(body["currency"]),
        receiver_id=identifier(body["receiver_id"], "receiver_id") if kind == "SPLIT" else None,
        notify_url=_url(body.get("notify_url")),
    )


def parse_day(value: str | None) -> date:
    try:
        return date.fromisoformat(value or "")
    except ValueError:
        raise bad("date must be YYYY-MM-DD", "date") from None


def _amount(value: object) -> int:
    if type(value) is not int or not 1 <= value <= MAX_AMOUNT:
        raise bad("amount must be an integer of minor units between 1 and 2^63-1", "amount")
    return value


def _currency(value: object) -> str:
    if not isinstance(value, str) or not CURRENCY.fullmatch(value):
        raise bad("currency must be an upper-case ISO-4217 code", "currency")
    return value


def _url(value: object) -> str | None:
    if value is None:
        return None
    ok = (
        isinstance(value, str)
        and value.startswith(("http://", "https://"))
        and len(value) <= MAX_URL
    )
    if not ok:
        raise bad("notify_url must be an http(s) URL", "notify_url")
    return str(value)
