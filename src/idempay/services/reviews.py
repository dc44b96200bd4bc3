"""The review queue (待人工确认): what automation could not resolve, resolved by a person.

An UNRESOLVED item (an instruction the worker could not settle) is resolved through the same CAS
as every other evidence, with the operator in the transition log. A DISCREPANCY item (evidence
reconciliation could not correct safely) records the operator's decision and note.
"""

from __future__ import annotations

from idempay.domain.errors import InvalidRequest, InvalidState, NotFound
from idempay.domain.ports import Discrepancy, Store, Tx
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

OUTCOMES = {"SUCCESS": InstructionStatus.SUCCESS, "FAILED": InstructionStatus.FAILED}


class _Taken(Exception):
    """Another operator resolved the item first."""


class Reviews:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def list(
        self, *, status: str | None, limit: int, before_id: str | None
    ) -> list[dict[str, object]]:
        return await self.store.list_reviews(status=status, limit=limit, before_id=before_id)

    async def resolve(self, review_id: str, outcome: str, note: str, operator_id: str) -> str:
        """Apply the operator's outcome; answers what happened (APPLIED, SAME or RECORDED)."""
        if outcome not in OUTCOMES:
            raise InvalidRequest("outcome must be SUCCESS or FAILED", field="outcome")
        if not note.strip():
            raise InvalidRequest("a note (the evidence) is required", field="note")
        review = await self.store.get_review(review_id)
        if review is None:
            raise NotFound(f"no review {review_id}")
        if review["status"] != "OPEN":
            raise InvalidState(f"review is {review['status']}", status=review["status"])
        actor = f"operator:{operator_id}"
        try:
            async with self.store.begin() as tx:
                if review["kind"] == "DISCREPANCY":
                    result = "RECORDED"
                else:
                    result = await self._apply(tx, review, outcome, note, actor)
                settled = result != Applied.CONFLICT  # a conflict stays open for a second look
                if settled and not await tx.resolve_review(review_id, outcome, note, actor):
                    raise _Taken
        except _Taken:
            raise InvalidState("review was resolved by someone else", status="RESOLVED") from None
        if result == Applied.CONFLICT:
            raise InvalidState(
                "the instruction is already settled otherwise; recorded as a discrepancy",
                status="CONFLICT",
            )
        return result

    async def _apply(
        self, tx: Tx, review: dict[str, object], outcome: str, note: str, actor: str
    ) -> str:
        ins = await tx.get_instruction(str(review["request_id"]))
        assert ins is not None
        ev = Evidence(OUTCOMES[outcome], actor, f"review {review['id']}: {note}")
        applied, now = await apply_outcome(tx, ins, ev)
        if applied is Applied.CONFLICT:
            await tx.add_discrepancy(
                Discrepancy(
                    dedupe_key=f"operator:{review['id']}",
                    source="operator",
                    cls="CONTRADICTS_TERMINAL",
                    channel=ins.channel,
                    request_id=ins.request_id,
                    merchant_id=ins.merchant_id,
                    payment_id=ins.payment_id,
                    local={"status": now.status},
                    remote={"operator": actor, "outcome": outcome, "note": note},
                )
            )
        return applied.value
