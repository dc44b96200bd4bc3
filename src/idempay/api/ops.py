"""Operator endpoints (/v1/ops/*, operator key only; a merchant key is 403): support look-ups
across merchants. Reviews and reconciliations join this router."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from idempay.api import ops_work
from idempay.api.auth import ContainerDep, operator
from idempay.api.idempotency import json_response
from idempay.api.query import only_query
from idempay.api.schemas import ID_PATTERN, dumps, ok, payment_json, problems, rfc3339
from idempay.domain.errors import NotFound
from idempay.domain.model import Instruction
from idempay.domain.states import Entity

# Every route of this router needs an operator key, including those added later.
router = APIRouter(prefix="/v1/ops", tags=["operations"], dependencies=[Depends(operator)])


def _log(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "from": r["from_status"],
            "to": r["to_status"],
            "reason": r["reason"],
            "actor": r["actor"],
            "at": rfc3339(r["created_at"]),
        }
        for r in rows
    ]


def _instruction(i: Instruction, log: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "request_id": i.request_id,
        "status": i.status,
        "attempt": i.attempt,
        "channel": i.channel,
        "amount": i.amount,
        "currency": i.currency,
        "send_count": i.send_count,
        "query_count": i.query_count,
        "last_error": i.last_error,
        "channel_txn_id": i.channel_txn_id,
        "next_query_at": rfc3339(i.next_query_at) if i.next_query_at else None,
        "created_at": rfc3339(i.created_at),
        "updated_at": rfc3339(i.updated_at),
        "transitions": log,
    }


@router.get(
    "/payments/{payment_id}",
    dependencies=[only_query()],
    response_model=None,
    responses={**ok("OpsPayment", 200), **problems(400, 401, 403, 404)},
)
async def get_payment(
    c: ContainerDep,
    payment_id: Annotated[str, Path(pattern=ID_PATTERN, description="The payment's id.")],
) -> Response:
    """Any merchant's payment by id, with its merchant, every attempt and both transition logs
    (payment and instructions): what support staff need to answer "what happened?"."""
    view = await c.store.view_by_id(payment_id)
    if view is None:
        raise NotFound(f"no payment {payment_id}")
    payment = view.payment
    body = payment_json(view)
    body["merchant_id"] = payment.merchant_id
    body["transitions"] = _log(await c.store.transition_log(Entity.PAYMENT, payment.id))
    body["events"] = [
        {
            **e,
            **{
                k: rfc3339(e[k]) if e[k] else None
                for k in ("next_attempt_at", "delivered_at", "created_at")
            },
        }
        for e in await c.store.events_for(payment.id)
    ]
    body["instructions"] = [
        _instruction(i, _log(await c.store.transition_log(Entity.INSTRUCTION, i.request_id)))
        for i in view.instructions
    ]
    return json_response(dumps(body), 200)


router.include_router(ops_work.router)
