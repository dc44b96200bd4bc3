"""Operator work: the review queue (待人工确认) and statement reconciliations (API.md, Operations).
Mounted on the ops router, so every route here needs an operator key."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field

from idempay.api.auth import ContainerDep, OperatorDep
from idempay.api.body import body_doc, parse_body
from idempay.api.idempotency import json_response
from idempay.api.metrics import Metrics
from idempay.api.openapi import register
from idempay.api.query import only_query
from idempay.api.schemas import ID_PATTERN, Identifier, StrictBody, dumps, ok, problems, rfc3339
from idempay.domain.errors import InvalidRequest, NotFound

router = APIRouter()
SYNC_WAIT_S = 10.0  # a reconciliation finished within this answers 201, otherwise 202
_running: set[asyncio.Task[Any]] = set()


class ResolveRequest(StrictBody):
    """POST /v1/ops/reviews/{id}/resolve."""

    outcome: Literal["SUCCESS", "FAILED"]
    note: str = Field(min_length=1, max_length=1000, description="The evidence.")


class ReconcileRequest(StrictBody):
    """POST /v1/ops/reconciliations."""

    channel: Identifier
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="A UTC calendar day.")


class Review(BaseModel):
    id: str
    kind: str
    status: str
    request_id: str | None
    merchant_id: str | None
    payment_id: str | None
    reason: str
    outcome: str | None
    note: str | None
    resolved_by: str | None
    created_at: str
    resolved_at: str | None


class ReviewList(BaseModel):
    items: list[Review]
    next_cursor: str | None


class Reconciliation(BaseModel):
    id: str
    channel: str
    date: str
    status: str
    counts: dict[str, int]
    discrepancies: list[dict[str, Any]]
    error: str | None


register(Review, ReviewList, Reconciliation)


def review_json(r: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "kind",
        "status",
        "request_id",
        "merchant_id",
        "payment_id",
        "reason",
        "outcome",
        "note",
        "resolved_by",
    )
    return {
        **{k: r[k] for k in keys},
        "created_at": rfc3339(r["created_at"]),
        "resolved_at": rfc3339(r["resolved_at"]) if r["resolved_at"] else None,
    }


def run_json(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": run["id"],
        "channel": run["channel"],
        "date": run["day"],
        "status": run["status"],
        "counts": run["counts"],
        "discrepancies": run["discrepancies"],
        "error": run["error"],
    }


@router.get(
    "/reviews",
    dependencies=[only_query("status", "limit", "cursor")],
    response_model=None,
    responses={**ok("ReviewList", 200), **problems(400, 401, 403)},
)
async def list_reviews(
    c: ContainerDep,
    status: Annotated[Literal["OPEN", "RESOLVED"], Query()] = "OPEN",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
) -> Response:
    """Review items, newest first: OPEN by default (what a person must look at)."""
    rows = await c.reviews.list(status=status, limit=limit + 1, before_id=cursor)
    page = rows[:limit]
    next_cursor = str(page[-1]["id"]) if len(rows) > limit else None
    return json_response(
        dumps({"items": [review_json(r) for r in page], "next_cursor": next_cursor}), 200
    )


@router.post(
    "/reviews/{review_id}/resolve",
    dependencies=[only_query()],
    response_model=None,
    openapi_extra=body_doc(ResolveRequest, required=True),
    responses={**ok("Review", 200), **problems(400, 401, 403, 404, 409, 413, 415)},
)
async def resolve_review(
    request: Request,
    c: ContainerDep,
    who: OperatorDep,
    review_id: Annotated[str, Path(pattern=ID_PATTERN)],
) -> Response:
    """Settle an item with the outcome and the evidence: the instruction and its payment move
    by the same CAS as any other evidence, logged as `operator:<id>` with the note."""
    body = await parse_body(
        request, ResolveRequest, max_bytes=c.settings.max_body_bytes, required=True
    )
    assert body.value is not None
    await c.reviews.resolve(review_id, body.value.outcome, body.value.note, who.id)
    metrics: Metrics = request.app.state.metrics
    metrics.resolutions.labels("operator").inc()
    review = await c.store.get_review(review_id)
    assert review is not None
    return json_response(dumps(review_json(review)), 200)


@router.post(
    "/reconciliations",
    dependencies=[only_query()],
    response_model=None,
    status_code=201,
    openapi_extra=body_doc(ReconcileRequest, required=True),
    responses={**ok("Reconciliation", 201, 202), **problems(400, 401, 403, 413, 415)},
)
async def reconcile(request: Request, c: ContainerDep) -> Response:
    """Reconcile one channel's statement of one UTC day: 201 when finished, 202 while running
    (poll GET). Running a day again never repeats a correction or a finding."""
    body = await parse_body(
        request, ReconcileRequest, max_bytes=c.settings.max_body_bytes, required=True
    )
    assert body.value is not None
    try:
        day = date.fromisoformat(body.value.date)
    except ValueError:
        raise InvalidRequest("date must be a calendar day YYYY-MM-DD", field="date") from None
    run_id = await c.reconciliation.start(body.value.channel, day)
    assert run_id is not None
    task = asyncio.create_task(c.reconciliation.run(run_id, body.value.channel, day))
    _running.add(task)
    task.add_done_callback(_running.discard)
    done, _ = await asyncio.wait({task}, timeout=SYNC_WAIT_S)
    run = await c.reconciliation.books.get_run(run_id)
    assert run is not None
    return json_response(dumps(run_json(run)), 201 if done else 202)


@router.get(
    "/reconciliations/{run_id}",
    dependencies=[only_query()],
    response_model=None,
    responses={**ok("Reconciliation", 200), **problems(400, 401, 403, 404)},
)
async def get_reconciliation(
    c: ContainerDep, run_id: Annotated[str, Path(pattern=ID_PATTERN)]
) -> Response:
    """A reconciliation run with its counts by class and every discrepancy but MATCH."""
    run = await c.reconciliation.books.get_run(run_id)
    if run is None:
        raise NotFound(f"no reconciliation {run_id}")
    return json_response(dumps(run_json(run)), 200)
