"""Payments: create-or-get, get, list, retry, close (API.md, Payments)."""

from __future__ import annotations

import base64
import binascii
import re
import time
from typing import Annotated

import structlog
from fastapi import APIRouter, Path, Query, Request, Response

from idempay.api.auth import ContainerDep, MerchantDep
from idempay.api.body import body_doc, parse_body
from idempay.api.idempotency import IdempotencyKey, KeyGuard, json_response
from idempay.api.metrics import Metrics
from idempay.api.query import only_query
from idempay.api.schemas import (
    ID_PATTERN,
    ChargeRequest,
    CloseRequest,
    RetryRequest,
    dumps,
    ok,
    payment_json,
    problems,
    write_status,
)
from idempay.bootstrap import Container
from idempay.domain.errors import InvalidRequest, InvalidState
from idempay.domain.model import ChargeResult
from idempay.domain.states import PaymentStatus
from idempay.services.idempotency import KeyTaken
from idempay.services.payments import ChargeCommand

router = APIRouter(prefix="/v1/payments", tags=["payments"])

BizNo = Annotated[str, Path(pattern=ID_PATTERN, description="The payment's biz_no.")]
IN_FLIGHT = frozenset({PaymentStatus.INIT, PaymentStatus.PROCESSING, PaymentStatus.UNKNOWN})
CURSOR_ID = re.compile(r"[A-Za-z0-9_]{1,48}")
CURSOR_PREFIX = "p1:"
WRITE = problems(400, 401, 403, 404, 409, 413, 415, 422)


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def _guard(
    request: Request, c: Container, merchant_id: str, key: str | None, body: str
) -> KeyGuard:
    async def current(payment_id: str) -> tuple[int, bytes]:
        """The answer for a keyed request that died: the payment as it is now."""
        view = await c.payments.get_by_id(merchant_id, payment_id)
        return write_status(view.payment.status in IN_FLIGHT, created=False), dumps(
            payment_json(view)
        )

    return KeyGuard(c.idempotency, _metrics(request), merchant_id, key, request, body, current)


async def _answer(
    request: Request, guard: KeyGuard, result: ChargeResult, status: int, t0: float
) -> Response:
    body = dumps(payment_json(result.view))
    await guard.answered(status, body, resource_id=result.view.payment.id, created=result.created)
    if result.replayed:
        _metrics(request).duplicate(result.stopped_by or "biz_no")
    elif result.created:
        _metrics(request).attempt(result.view, time.perf_counter() - t0)
    return json_response(body, status, replayed=result.replayed)


@router.post(
    "",
    dependencies=[only_query()],
    response_model=None,
    status_code=201,
    openapi_extra=body_doc(ChargeRequest, required=True),
    responses={**ok("Payment", 201, 200, 202), **WRITE},
)
async def create_payment(
    request: Request, c: ContainerDep, merchant: MerchantDep, key: IdempotencyKey = None
) -> Response:
    """Create, or return, the payment for (merchant, biz_no). 201 created and terminal, 200
    terminal and already there, 202 PROCESSING or UNKNOWN. A repeat never calls the channel."""
    body = await parse_body(
        request, ChargeRequest, max_bytes=c.settings.max_body_bytes, required=True
    )
    assert body.value is not None
    structlog.contextvars.bind_contextvars(biz_no=body.value.biz_no)
    guard = _guard(request, c, merchant.id, key, body.canonical)
    if (early := await guard.prior()) is not None:
        return early
    t0 = time.perf_counter()
    try:
        cmd = ChargeCommand(**body.value.model_dump())
        result = await c.payments.charge(merchant.id, cmd, on_create=guard.hook)
    except KeyTaken as e:
        return await guard.lost_race(e)
    return await _answer(
        request,
        guard,
        result,
        write_status(result.view.payment.status in IN_FLIGHT, created=result.created),
        t0,
    )


@router.get(
    "",
    dependencies=[only_query("order_no", "status", "limit", "cursor")],
    response_model=None,
    responses={**ok("PaymentList", 200), **problems(400, 401, 403)},
)
async def list_payments(
    c: ContainerDep,
    merchant: MerchantDep,
    order_no: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    status: Annotated[PaymentStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[
        str | None, Query(max_length=128, description="A previous next_cursor.")
    ] = None,
) -> Response:
    """The merchant's payments, newest first, `limit` (1-100, default 20) per page."""
    before = _decode_cursor(cursor) if cursor is not None else None
    views = await c.payments.list_payments(
        merchant.id, order_no=order_no, status=status, limit=limit + 1, before_id=before
    )
    page = views[:limit]
    more = len(views) > limit
    next_cursor = _encode_cursor(page[-1].payment.id) if more else None
    items = [payment_json(v) for v in page]
    return json_response(dumps({"items": items, "next_cursor": next_cursor}), 200)


@router.get(
    "/{biz_no}",
    dependencies=[only_query()],
    response_model=None,
    responses={**ok("Payment", 200), **problems(400, 401, 403, 404)},
)
async def get_payment(c: ContainerDep, merchant: MerchantDep, biz_no: BizNo) -> Response:
    """The payment resource (another merchant's payment is 404)."""
    view = await c.payments.get(merchant.id, biz_no)
    return json_response(dumps(payment_json(view)), 200)


@router.post(
    "/{biz_no}/retry",
    dependencies=[only_query()],
    response_model=None,
    openapi_extra=body_doc(RetryRequest, required=False),
    responses={**ok("Payment", 200, 202), **WRITE},
)
async def retry_payment(
    request: Request,
    c: ContainerDep,
    merchant: MerchantDep,
    biz_no: BizNo,
    key: IdempotencyKey = None,
) -> Response:
    """Only from FAILED: a new attempt with a new request_id, optionally with a new amount (the
    change is recorded in the payment's transition log); otherwise 409 INVALID_STATE."""
    body = await parse_body(
        request, RetryRequest, max_bytes=c.settings.max_body_bytes, required=False
    )
    structlog.contextvars.bind_contextvars(biz_no=biz_no)
    amount = body.value.amount if body.value is not None else None
    guard = _guard(request, c, merchant.id, key, body.canonical)
    if (early := await guard.prior()) is not None:
        return early
    t0 = time.perf_counter()
    try:
        result = await c.payments.retry(merchant.id, biz_no, amount, on_start=guard.hook)
    except (KeyTaken, InvalidState) as e:
        return await guard.lost_race(e)
    return await _answer(
        request,
        guard,
        result,
        write_status(result.view.payment.status in IN_FLIGHT, created=False),
        t0,
    )


@router.post(
    "/{biz_no}/close",
    dependencies=[only_query()],
    response_model=None,
    openapi_extra=body_doc(CloseRequest, required=False),
    responses={**ok("Payment", 200), **WRITE},
)
async def close_payment(
    request: Request,
    c: ContainerDep,
    merchant: MerchantDep,
    biz_no: BizNo,
    key: IdempotencyKey = None,
) -> Response:
    """Only from INIT or FAILED; otherwise 409 INVALID_STATE."""
    body = await parse_body(
        request, CloseRequest, max_bytes=c.settings.max_body_bytes, required=False
    )
    structlog.contextvars.bind_contextvars(biz_no=biz_no)
    guard = _guard(request, c, merchant.id, key, body.canonical)
    if (early := await guard.prior()) is not None:
        return early
    try:
        view = await c.payments.close(merchant.id, biz_no, on_close=guard.hook)
    except (KeyTaken, InvalidState) as e:
        return await guard.lost_race(e)
    body_out = dumps(payment_json(view))
    await guard.answered(200, body_out, resource_id=view.payment.id, created=True)
    return json_response(body_out, 200)


def _encode_cursor(payment_id: str) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{payment_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.b64decode(padded, altchars=b"-_", validate=True).decode("ascii")
    except (ValueError, binascii.Error):
        raw = ""
    payment_id = raw.removeprefix(CURSOR_PREFIX)
    if not raw.startswith(CURSOR_PREFIX) or not CURSOR_ID.fullmatch(payment_id):
        raise InvalidRequest("cursor is not a next_cursor of this list", field="cursor")
    return payment_id
