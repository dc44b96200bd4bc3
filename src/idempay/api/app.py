"""The FastAPI application: routers, middleware, and the ONE place where errors (domain errors by
class, framework errors) become RFC 9457 problem documents."""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from idempay import __version__
from idempay.api import callbacks, health, openapi, ops, payments, refunds, splits
from idempay.api.auth import PrincipalCache
from idempay.api.body import PayloadTooLarge, UnsupportedMediaType
from idempay.api.health import Unavailable
from idempay.api.metrics import Metrics
from idempay.api.middleware import RequestContext
from idempay.api.schemas import dumps
from idempay.api.settlement_metrics import SettlementGauges
from idempay.bootstrap import Container
from idempay.domain.errors import (
    BizNoReused,
    Forbidden,
    IdempayError,
    IdempotencyKeyReused,
    InsufficientBalance,
    InvalidRequest,
    InvalidState,
    NotFound,
    RequestInProgress,
    Unauthenticated,
)

log = structlog.get_logger("idempay.api")

# The routers of API.md. A later feature adds its router here (or passes it to create_app).
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    payments.router,
    ops.router,
    callbacks.router,
    refunds.router,
    splits.router,
)

# Domain error class -> HTTP status; looked up along the MRO, anything else is a 500.
STATUS: dict[type[IdempayError], int] = {
    InvalidRequest: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    RequestInProgress: 409,
    InvalidState: 409,
    PayloadTooLarge: 413,
    UnsupportedMediaType: 415,
    IdempotencyKeyReused: 422,
    BizNoReused: 422,
    InsufficientBalance: 422,
    Unavailable: 503,
}
HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    request_id: str | None,
    errors: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    doc: dict[str, Any] = {
        "type": f"urn:idempay:problem:{code.lower().replace('_', '-')}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "request_id": request_id,
    }
    if errors:
        doc["errors"] = errors
    return Response(dumps(doc), status, headers=headers, media_type="application/problem+json")


def status_of(error: IdempayError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def _request_id(request: Request) -> str | None:
    return getattr(request.state, "request_id", None)


async def on_domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, IdempayError)
    status = status_of(exc)
    if status >= 500 and status != 503:
        log.error("http.internal_error", error=type(exc).__name__, detail=exc.detail)
        return internal_error(_request_id(request))
    errors: list[dict[str, str]] | None = None
    headers: dict[str, str] | None = None
    if isinstance(exc, InvalidRequest) and exc.field:
        errors = [{"field": exc.field, "message": exc.detail}]
    elif isinstance(exc, BizNoReused):
        errors = [{"field": f, "message": "differs from the existing one"} for f in exc.fields]
    if isinstance(exc, Unauthenticated):
        headers = {"WWW-Authenticate": 'Bearer realm="idempay"'}
    elif isinstance(exc, RequestInProgress):
        headers = {"Retry-After": "1"}
    detail = exc.detail or HTTPStatus(status).phrase
    return problem(
        status, exc.code, detail, request_id=_request_id(request), errors=errors, headers=headers
    )


async def on_validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's validation errors (query, path, header, body): 400, never 422."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "field": ".".join(str(p) for p in e["loc"][1:]) or str(e["loc"][0]),
            "in": str(e["loc"][0]),
            "message": str(e["msg"]),
        }
        for e in exc.errors()
    ]
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return problem(400, InvalidRequest.code, detail, request_id=_request_id(request), errors=errors)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = HTTP_CODES.get(status, f"HTTP_{status}")
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
    if status == 404:
        detail = f"no route {request.method} {request.url.path}"
    return problem(
        status, code, detail, request_id=_request_id(request), headers=dict(exc.headers or {})
    )


def internal_error(request_id: str | None) -> Response:
    return problem(
        500, "INTERNAL", "an internal error occurred; it has been logged", request_id=request_id
    )


def create_app(container: Container, *, routers: Sequence[APIRouter] = ()) -> FastAPI:
    """The API over `container` (built by bootstrap.build; the caller closes it)."""
    app = FastAPI(
        title="idempay",
        version=__version__,
        summary="Charges each payment intent at most once.",
        openapi_url="/openapi.json",
        redoc_url=None,
    )
    app.state.container = container
    app.state.principals = PrincipalCache(container.settings.auth_cache_s)
    app.state.metrics = metrics = Metrics()
    app.state.settlement = SettlementGauges(metrics.registry)
    for router in (*ROUTERS, *routers):
        app.include_router(router)
    app.add_exception_handler(IdempayError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_middleware(RequestContext, metrics=metrics, on_crash=internal_error)
    openapi.install(app, container)
    return app
