"""Splits (profit sharing) over HTTP: create-or-get and get (API.md, Splits), with the request and
resource schemas; answers and statuses like a payment's, Idempotency-Key included."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, Field, field_validator

from idempay.api.auth import ContainerDep, MerchantDep
from idempay.api.body import DOCUMENTED, body_doc, parse_body
from idempay.api.idempotency import IdempotencyKey, KeyGuard, json_response, keyed_create
from idempay.api.metrics import Metrics
from idempay.api.query import only_query
from idempay.api.schemas import (
    ID_PATTERN,
    Amount,
    Identifier,
    StrictBody,
    answers,
    dumps,
    problems,
    rfc3339,
    write_status,
)
from idempay.domain import model as domain
from idempay.domain.states import SplitItemStatus, SplitStatus
from idempay.services.splits import MAX_RECEIVERS, Receiver, SplitCommand, SplitResult

router = APIRouter(prefix="/v1/splits", tags=["splits"])

SplitNo = Annotated[str, Path(pattern=ID_PATTERN, description="The split's split_no.")]
IN_FLIGHT = frozenset({SplitStatus.PENDING, SplitStatus.PROCESSING})
WRITE = problems(400, 401, 403, 404, 409, 413, 415, 422)


class SplitReceiver(StrictBody):
    """One receiver of a split and the amount it gets."""

    receiver_id: Identifier
    amount: Amount


class SplitRequest(StrictBody):
    """POST /v1/splits: their sum is reserved on the payment's available amount."""

    split_no: Identifier = Field(description="The split's serial number, unique per merchant.")
    biz_no: Identifier = Field(description="The SUCCESS payment to share.")
    receivers: list[SplitReceiver] = Field(
        min_length=1, max_length=MAX_RECEIVERS, description="Distinct receiver_id values."
    )

    @field_validator("receivers")
    @classmethod
    def _distinct(cls, receivers: list[SplitReceiver]) -> list[SplitReceiver]:
        if len({r.receiver_id for r in receivers}) != len(receivers):
            raise ValueError("receiver_id must be distinct")
        return receivers


# Nested in SplitRequest: documented on its own too, so its amount carries the configured maximum.
DOCUMENTED[SplitReceiver.__name__] = SplitReceiver


class SplitItem(BaseModel):
    """One receiver's share; `request_id` is its instruction's (null until the split starts)."""

    receiver_id: str
    amount: int
    status: SplitItemStatus
    request_id: str | None


class Split(BaseModel):
    """A split: PENDING, PROCESSING until every item is terminal, then SUCCESS, PARTIAL or
    FAILED."""

    id: str
    split_no: str
    biz_no: str
    amount: int
    currency: str
    status: SplitStatus
    items: list[SplitItem]
    created_at: datetime
    updated_at: datetime


def split_json(view: domain.SplitView) -> dict[str, Any]:
    s = view.split
    return {
        "id": s.id,
        "split_no": s.split_no,
        "biz_no": s.biz_no,
        "amount": s.amount,
        "currency": s.currency,
        "status": s.status,
        "items": [
            {
                "receiver_id": item.receiver_id,
                "amount": item.amount,
                "status": item.status,
                "request_id": ins.request_id if ins is not None else None,
            }
            for item, ins in view.items
        ],
        "created_at": rfc3339(s.created_at),
        "updated_at": rfc3339(s.updated_at),
    }


@router.post(
    "",
    dependencies=[only_query()],
    response_model=None,
    status_code=201,
    openapi_extra=body_doc(SplitRequest, required=True),
    responses={**answers(Split, 201, 200, 202), **WRITE},
)
async def create_split(
    request: Request, c: ContainerDep, merchant: MerchantDep, key: IdempotencyKey = None
) -> Response:
    """Create, or return, the split for (merchant, split_no) of a SUCCESS payment and execute
    it once: 201 created and terminal, 200 terminal and already there, 202 PENDING or
    PROCESSING. Splits and refunds of a payment never exceed it (422 INSUFFICIENT_BALANCE)."""
    body = await parse_body(
        request, SplitRequest, max_bytes=c.settings.max_body_bytes, required=True
    )
    assert body.value is not None
    v = body.value
    receivers = tuple(Receiver(r.receiver_id, r.amount) for r in v.receivers)
    cmd = SplitCommand(v.split_no, v.biz_no, receivers)
    structlog.contextvars.bind_contextvars(split_no=cmd.split_no, biz_no=cmd.biz_no)
    metrics: Metrics = request.app.state.metrics

    async def current(_split_id: str) -> tuple[int, bytes]:
        """The answer for a keyed request that died: the split as it is now, started first if
        its creator died before it could (a replay of the same split does that)."""
        view = (await c.splits.create(merchant.id, cmd)).view
        return write_status(view.split.status in IN_FLIGHT, created=False), dumps(split_json(view))

    guard = KeyGuard(c.idempotency, metrics, merchant.id, key, request, body.canonical, current)

    def answer(result: SplitResult) -> tuple[int, bytes, str, bool, bool]:
        view = result.view
        status = write_status(view.split.status in IN_FLIGHT, created=result.created)
        return status, dumps(split_json(view)), view.split.id, result.created, result.replayed

    return await keyed_create(
        guard,
        metrics,
        "split_no",
        lambda hook: c.splits.create(merchant.id, cmd, on_create=hook),
        answer,
    )


@router.get(
    "/{split_no}",
    dependencies=[only_query()],
    response_model=None,
    responses={**answers(Split, 200), **problems(400, 401, 403, 404)},
)
async def get_split(c: ContainerDep, merchant: MerchantDep, split_no: SplitNo) -> Response:
    """The split resource with its items (another merchant's split is 404)."""
    view = await c.splits.get(merchant.id, split_no)
    return json_response(dumps(split_json(view)), 200)
