"""Channel callbacks: `POST /v1/channels/{channel}/notify`, authenticated by the channel's
signature (checked on the raw bytes before anything is parsed), answered in its own format."""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import JSONResponse

from idempay.api.auth import ContainerDep
from idempay.api.body import read_limited
from idempay.api.metrics import Metrics
from idempay.api.query import only_query
from idempay.api.schemas import ID_PATTERN, problems
from idempay.domain.errors import NotFound, Unauthenticated

log = structlog.get_logger(__name__)
router = APIRouter(tags=["channels"])


@router.post(
    "/v1/channels/{channel}/notify",
    dependencies=[only_query()],
    response_model=None,
    responses={
        200: {"description": "Acknowledged, in the channel's own format"},
        **problems(400, 401, 404, 413),
    },
)
async def notify(
    request: Request,
    c: ContainerDep,
    channel: Annotated[str, Path(pattern=ID_PATTERN, description="The channel's name.")],
) -> Response:
    """A channel's asynchronous result. Bad signature or a timestamp more than 5 minutes off
    (either way) is 401 and nothing is applied; a repeated notify_id is acknowledged and not
    applied again; an amount or request_id that disagrees with our books is recorded as a
    discrepancy, never applied."""
    metrics: Metrics = request.app.state.metrics
    adapter = c.channels.get(channel)
    if adapter is None:
        raise NotFound(f"no channel {channel}")
    body = await read_limited(request, c.settings.max_body_bytes)
    try:
        notification = adapter.verify_callback(request.headers, body, c.clock.now())
    except Unauthenticated:
        metrics.callback(channel, "REJECTED")
        log.warning("callback.rejected", channel=channel)
        raise
    result = await c.callbacks.receive(channel, notification)
    metrics.callback(channel, result)
    status, payload = adapter.callback_ack()
    return JSONResponse(payload, status)
