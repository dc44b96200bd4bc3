"""Request bodies (strict: unknown fields, floats, numeric strings and booleans are refused) and
the JSON resources the API answers, with the models that document them in OpenAPI."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StringConstraints

from idempay.domain.model import PaymentView
from idempay.domain.money import ISO_4217, MAX_MINOR
from idempay.domain.states import InstructionStatus, PaymentStatus

ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"  # API.md, Conventions: every client-supplied identifier


def _text(value: str) -> str:
    """Text the databases can store: valid Unicode (no lone surrogates), no NUL."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text") from None
    return value


Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Amount = Annotated[
    StrictInt, Field(ge=1, le=MAX_MINOR, description="Minor units (19900 = 199.00).")
]
Currency = Annotated[
    str,
    Field(
        pattern=r"^[A-Z]{3}$",
        description="ISO-4217 code.",
        json_schema_extra={"enum": sorted(ISO_4217)},
    ),
]
ChannelName = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Description = Annotated[str, StringConstraints(max_length=256), AfterValidator(_text)]
NotifyUrl = Annotated[
    str, StringConstraints(max_length=2048, pattern=r"^https?://[^\s]+$"), AfterValidator(_text)
]


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ChargeRequest(StrictBody):
    """POST /v1/payments."""

    biz_no: Identifier = Field(
        description="The payment intent's serial number, unique per merchant."
    )
    order_no: Identifier
    amount: Amount
    currency: Currency
    channel: ChannelName
    description: Description | None = None
    notify_url: NotifyUrl | None = None


class RetryRequest(StrictBody):
    """POST /v1/payments/{biz_no}/retry: empty, or a new amount (the order changed)."""

    amount: Amount | None = None


class CloseRequest(StrictBody):
    """POST /v1/payments/{biz_no}/close: empty (or `{}`)."""


# --- resources (documentation models; the answers themselves are built by the functions below) ---


class Instruction(BaseModel):
    request_id: str
    status: InstructionStatus
    query_count: int


class Payment(BaseModel):
    id: str
    biz_no: str
    order_no: str
    amount: int
    currency: str
    channel: str
    status: PaymentStatus
    attempt: int
    refunded_amount: int
    split_amount: int
    description: str | None
    notify_url: str | None
    instructions: list[Instruction]
    created_at: datetime
    updated_at: datetime


class PaymentList(BaseModel):
    items: list[Payment]
    next_cursor: str | None


class Transition(BaseModel):
    from_: str | None = Field(alias="from")
    to: str
    reason: str
    actor: str
    at: datetime


class OpsInstruction(BaseModel):
    request_id: str
    status: InstructionStatus
    attempt: int
    channel: str
    amount: int
    currency: str
    send_count: int
    query_count: int
    last_error: str | None
    channel_txn_id: str | None
    next_query_at: datetime | None
    created_at: datetime
    updated_at: datetime
    transitions: list[Transition]


class OpsEvent(BaseModel):
    """A webhook event of the payment and its delivery state."""

    id: str
    kind: str
    status: str = Field(description="PENDING, DELIVERED, SKIPPED (no notify_url) or FAILED")
    attempts: int
    last_error: str | None
    next_attempt_at: str | None
    delivered_at: str | None
    created_at: str


class OpsPayment(Payment):
    """A payment as support staff see it: its merchant, every attempt, both transition logs,
    and the delivery state of its webhook events."""

    merchant_id: str
    instructions: list[OpsInstruction]  # type: ignore[assignment]
    transitions: list[Transition]
    events: list[OpsEvent]


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem document (`application/problem+json`)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    request_id: str | None = None
    errors: list[FieldProblem] | None = None


class Health(BaseModel):
    status: str


def rfc3339(moment: datetime) -> str:
    """UTC, second precision, with `Z` (every database keeps at least seconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def payment_json(view: PaymentView) -> dict[str, Any]:
    p = view.payment
    return {
        "id": p.id,
        "biz_no": p.biz_no,
        "order_no": p.order_no,
        "amount": p.amount,
        "currency": p.currency,
        "channel": p.channel,
        "status": p.status,
        "attempt": p.attempt,
        "refunded_amount": p.refunded_amount,
        "split_amount": p.split_amount,
        "description": p.description,
        "notify_url": p.notify_url,
        "instructions": [
            {"request_id": i.request_id, "status": i.status, "query_count": i.query_count}
            for i in view.instructions
        ],
        "created_at": rfc3339(p.created_at),
        "updated_at": rfc3339(p.updated_at),
    }


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def ok(model: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries answering the `model` component as application/json."""
    ref = {"$ref": f"#/components/schemas/{model}"}
    return {
        s: {"description": HTTPStatus(s).phrase, "content": {"application/json": {"schema": ref}}}
        for s in statuses
    }


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries answering a problem document."""
    ref = {"$ref": "#/components/schemas/Problem"}
    content = {"application/problem+json": {"schema": ref}}
    return {s: {"description": HTTPStatus(s).phrase, "content": content} for s in statuses}


def answers(model: type[BaseModel], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries answering the pydantic `model` as application/json."""
    return {s: {"description": HTTPStatus(s).phrase, "model": model} for s in statuses}


def write_status(in_flight: bool, *, created: bool) -> int:
    """202 while in flight (poll GET); else 201 when this call created it, 200 when it existed."""
    if in_flight:
        return 202
    return 201 if created else 200
