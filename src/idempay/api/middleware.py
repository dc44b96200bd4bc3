"""One pure-ASGI middleware around every request: X-Request-Id on every response, the request's
log context, metrics by route template, and the last-resort 500 for anything unhandled."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

import structlog
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from idempay.api.metrics import Metrics

log = structlog.get_logger("idempay.api")

REQUEST_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def request_id_of(scope: Scope) -> str:
    """The caller's X-Request-Id when it is a sane token, else a new one."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate: str = value.decode("latin-1")
            if REQUEST_ID.fullmatch(candidate):
                return candidate
            break
    return uuid.uuid4().hex


CLIENT_CLOSED = 499  # nginx's code for a client that closed the connection first


class RequestContext:
    def __init__(
        self, app: ASGIApp, *, metrics: Metrics, on_crash: Callable[[str], Response]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.on_crash = on_crash

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=rid)
        scope.setdefault("state", {})["request_id"] = rid
        status = 500
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
                MutableHeaders(scope=message)["X-Request-Id"] = rid
            await send(message)

        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:  # the client went away mid-body: nothing to answer, no error
            status = CLIENT_CLOSED
        except Exception:
            log.exception("http.unhandled_error", path=scope.get("path"))
            if not started:
                await self.on_crash(rid)(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - t0
            route = _route_label(scope, status)
            self.metrics.request(scope["method"], route, status, elapsed)
            log.info(
                "http.request",
                method=scope["method"],
                route=route,
                status=status,
                duration_ms=round(elapsed * 1000, 2),
            )


def _route_label(scope: Scope, status: int) -> str:
    """The route template (bounded cardinality): /v1/payments/{biz_no}, not the raw path. The
    few fixed routes that are not API routes (/openapi.json, /docs) answer their own path."""
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str):
        return template
    return str(scope["path"]) if 200 <= status < 300 else "unmatched"
