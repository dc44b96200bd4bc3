"""Refunds over HTTP: create-or-get and get (API.md, Refunds), with the request and resource
schemas; answers and statuses like a payment's, Idempotency-Key included."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, Field

from idempay.api.auth import ContainerDep, MerchantDep
from idempay.api.body import body_doc, parse_body
from idempay.api.idempotency import IdempotencyKey, KeyGuard, json_response, keyed_create
from idempay.api.metrics import Metrics
from idempay.api.query import only_query
from idempay.api.schemas import (
    ID_PATTERN,
    Amount,
    Description,
    Identifier,
    Instruction,
    StrictBody,
    answers,
    dumps,
    problems,
    rfc3339,
    write_status,
)
from idempay.domain import model as domain
from idempay.domain.states import PaymentStatus
from idempay.services.refunds import RefundCommand, RefundResult

router = APIRouter(prefix="/v1/refunds", tags=["refunds"])

RefundNo = Annotated[str, Path(pattern=ID_PATTERN, description="The refund's refund_no.")]
IN_FLIGHT = frozenset({PaymentStatus.INIT, PaymentStatus.PROCESSING, PaymentStatus.UNKNOWN})
WRITE = problems(400, 401, 403, 404, 409, 413, 415, 422)


class RefundRequest(StrictBody):
    """POST /v1/refunds."""

    refund_no: Identifier = Field(description="The refund's serial number, unique per merchant.")
    biz_no: Identifier = Field(description="The SUCCESS payment to refund.")
    amount: Amount
    reason: Description | None = None


class Refund(BaseModel):
    """A refund: the same states as a payment; `instructions` are its attempts at the channel."""

    id: str
    refund_no: str
    biz_no: str
    amount: int
    currency: str
    status: PaymentStatus
    reason: str | None
    instructions: list[Instruction]
    created_at: datetime
    updated_at: datetime


def refund_json(view: domain.RefundView) -> dict[str, Any]:
    r = view.refund
    return {
        "id": r.id,
        "refund_no": r.refund_no,
        "biz_no": r.biz_no,
        "amount": r.amount,
        "currency": r.currency,
        "status": r.status,
        "reason": r.reason,
        "instructions": [
            {"request_id": i.request_id, "status": i.status, "query_count": i.query_count}
            for i in view.instructions
        ],
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
    }


@router.post(
    "",
    dependencies=[only_query()],
    response_model=None,
    status_code=201,
    openapi_extra=body_doc(RefundRequest, required=True),
    responses={**answers(Refund, 201, 200, 202), **WRITE},
)
async def create_refund(
    request: Request, c: ContainerDep, merchant: MerchantDep, key: IdempotencyKey = None
) -> Response:
    """Create, or return, the refund for (merchant, refund_no) of a SUCCESS payment: 201 created
    and terminal, 200 terminal and already there, 202 PROCESSING or UNKNOWN. The refunds and
    splits of a payment never exceed its amount (422 INSUFFICIENT_BALANCE)."""
    body = await parse_body(
        request, RefundRequest, max_bytes=c.settings.max_body_bytes, required=True
    )
    assert body.value is not None
    cmd = RefundCommand(**body.value.model_dump())
    structlog.contextvars.bind_contextvars(refund_no=cmd.refund_no, biz_no=cmd.biz_no)
    metrics: Metrics = request.app.state.metrics

    async def current(_refund_id: str) -> tuple[int, bytes]:
        """The answer for a keyed request that died: the refund as it is now."""
        view = await c.refunds.get(merchant.id, cmd.refund_no)
        return write_status(view.refund.status in IN_FLIGHT, created=False), dumps(
            refund_json(view)
        )

    guard = KeyGuard(c.idempotency, metrics, merchant.id, key, request, body.canonical, current)

    def answer(result: RefundResult) -> tuple[int, bytes, str, bool, bool]:
        view = result.view
        status = write_status(view.refund.status in IN_FLIGHT, created=result.created)
        return status, dumps(refund_json(view)), view.refund.id, result.created, result.replayed

    return await keyed_create(
        guard,
        metrics,
        "refund_no",
        lambda hook: c.refunds.create(merchant.id, cmd, on_create=hook),
        answer,
    )


@router.get(
    "/{refund_no}",
    dependencies=[only_query()],
    response_model=None,
    responses={**answers(Refund, 200), **problems(400, 401, 403, 404)},
)
async def get_refund(c: ContainerDep, merchant: MerchantDep, refund_no: RefundNo) -> Response:
    """The refund resource (another merchant's refund is 404)."""
    view = await c.refunds.get(merchant.id, refund_no)
    return json_response(dumps(refund_json(view)), 200)
