"""The review queue (待人工确认): what automation could not resolve, resolved by a person through
the same CAS as every other evidence, with the operator in the transition log."""

from __future__ import annotations

from idempay.domain.errors import InvalidRequest, InvalidState, NotFound
from idempay.domain.ports import Discrepancy, Store
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

OUTCOMES = {"SUCCESS": InstructionStatus.SUCCESS, "FAILED": InstructionStatus.FAILED}


class Reviews:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def resolve(self, review_id: str, outcome: str, note: str, operator_id: str) -> str:
        """Apply the operator's outcome to the instruction and its payment; answers the result."""
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
        ev = Evidence(OUTCOMES[outcome], actor, f"review {review_id}: {note}")
        async with self.store.begin() as tx:
            ins = await tx.get_instruction(review["request_id"])
            assert ins is not None
            applied, now = await apply_outcome(tx, ins, ev)
            if applied is Applied.CONFLICT:
                await tx.add_discrepancy(
                    Discrepancy(
                        dedupe_key=f"operator:{review_id}",
                        source="operator",
                        cls="CONTRADICTS_TERMINAL",
                        channel=ins.channel,
                        request_id=ins.request_id,
                        merchant_id=ins.merchant_id,
                        payment_id=ins.payment_id,
                        local={"status": now.status},
                        remote={"operator": operator_id, "outcome": outcome, "note": note},
                    )
                )
            else:
                await tx.close_review(ins.request_id, outcome, note, actor)
        if applied is Applied.CONFLICT:
            raise InvalidState(
                f"instruction is already {now.status}; recorded as a discrepancy", status=now.status
            )
        return applied.value
