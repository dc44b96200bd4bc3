"""Unauthenticated endpoints for machines: `/healthz` (the database answers) and `/metrics`."""

from __future__ import annotations

import asyncio

import structlog
from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from idempay.api.auth import ContainerDep
from idempay.api.metrics import Metrics
from idempay.api.schemas import dumps, ok, problems
from idempay.domain.errors import IdempayError

log = structlog.get_logger(__name__)
router = APIRouter(tags=["health"])
PING_TIMEOUT_S = 3.0


class Unavailable(IdempayError):
    code = "UNAVAILABLE"


@router.get("/healthz", response_model=None, responses={**ok("Health", 200), **problems(503)})
async def healthz(container: ContainerDep) -> Response:
    """200 when the database answers, else 503."""
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await container.store.ping()
    except Exception as e:
        log.warning("healthz.database_unavailable", error=type(e).__name__)
        raise Unavailable("the database does not answer") from None
    return Response(dumps({"status": "ok"}), media_type="application/json")


@router.get(
    "/metrics",
    response_model=None,
    response_class=PlainTextResponse,
    responses={200: {"description": "Prometheus text format", "content": {"text/plain": {}}}},
)
async def metrics(request: Request, container: ContainerDep) -> Response:
    """Prometheus metrics of this process, the front lock's counters included."""
    registry: Metrics = request.app.state.metrics
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await request.app.state.settlement.refresh(container.store)
    except Exception as e:  # the process's own metrics are still worth answering
        log.warning("metrics.settlement_unavailable", error=type(e).__name__)
    return Response(registry.render(container.lock), media_type=CONTENT_TYPE_LATEST)
