"""The bank itself: executes operations into the ledger under the current faults (idempotent on
request_id unless switched off), answers queries, closes request_ids for good, settles
asynchronous operations later, and lists a day's statement."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import structlog

from idempay.simbank.background import Background
from idempay.simbank.callbacks import Notifier
from idempay.simbank.faults import Decision, Dice, Faults
from idempay.simbank.ledger import Execution, Ledger, Op

log = structlog.get_logger("idempay.simbank")

DECLINE_REASON = "INSUFFICIENT_FUNDS"
CLOSED_REASON = "CLOSED"


class RequestIdReused(Exception):
    """The request_id is known with other parameters (or another kind): nothing was done."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Bank:
    """Everything here is synchronous between awaits, so check-then-record is atomic on the
    simulator's single event loop: a close and an execution of one request_id never interleave."""

    def __init__(
        self,
        ledger: Ledger,
        notifier: Notifier,
        background: Background,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.ledger = ledger
        self.notifier = notifier
        self.background = background
        self.clock = clock
        self.faults = Faults()
        self._dice = Dice(self.faults)

    def set_faults(self, faults: Faults) -> None:
        """Replace the whole fault set; the dice start again from its seed."""
        self.faults = faults
        self._dice = Dice(faults)

    def roll(self) -> Decision:
        """The fault decision of the next operation request, in arrival order."""
        return self._dice.roll()

    def execute(self, op: Op, decision: Decision) -> dict[str, Any]:
        """Execute `op` (or answer why not). `decision.error` is the caller's business: a 5xx
        is answered before anything reaches the bank."""
        closed_at = self.ledger.closed_at(op.request_id)
        if closed_at is not None:
            return _closed_answer(op.request_id, op.kind, closed_at)
        first = self.ledger.first(op.request_id)
        if first is not None and self.faults.idempotency:
            if not first.same_request(op):
                raise RequestIdReused(
                    f"request_id {op.request_id} was received with other parameters"
                )
            return {**first.public(), "replayed": True}
        final = "FAILED" if decision.decline else "SUCCESS"
        if decision.pending:
            e = self.ledger.record(op, "PROCESSING", None, final, self.clock())
            self.background.spawn(self._settle_later(e, decision, self.faults.async_settle_ms))
        else:
            reason = DECLINE_REASON if decision.decline else None
            e = self.ledger.record(op, final, reason, None, self.clock())
            self.notifier.notify(e, decision, self.faults.callback_delay_ms)
        log.debug("simbank.executed", request_id=op.request_id, kind=op.kind, status=e.status)
        return e.public()

    def query(self, kind: str, request_id: str) -> dict[str, Any] | None:
        """The current status of `request_id`; None when it never arrived as `kind`."""
        closed_at = self.ledger.closed_at(request_id)
        if closed_at is not None:
            return _closed_answer(request_id, kind, closed_at)
        first = self.ledger.first(request_id)
        if first is None or first.kind != kind:
            return None
        return first.public()

    def close(self, kind: str, request_id: str) -> dict[str, Any]:
        """Close a request_id that never executed (it never will); an executed one answers its
        real status instead."""
        first = self.ledger.first(request_id)
        if first is not None:
            if first.kind != kind:
                raise RequestIdReused(f"request_id {request_id} is a {first.kind}, not a {kind}")
            return first.public()
        closed_at = self.ledger.close(request_id, kind, self.clock())
        return {"request_id": request_id, "kind": kind, "status": "CLOSED", "closed_at": closed_at}

    def statement(self, day: date) -> list[dict[str, Any]]:
        return [e.public() for e in self.ledger.on_day(day)]

    def resume_pending(self) -> None:
        """After a restart: settle what was still PROCESSING (without faults on its callback)."""
        for e in self.ledger.pending():
            self.background.spawn(self._settle_later(e, Decision(), self.faults.async_settle_ms))

    async def reset(self) -> None:
        """Forget everything: pending settlements and callbacks, the ledger, the faults."""
        await self.background.cancel_all()
        self.ledger.reset()
        self.set_faults(Faults())

    async def _settle_later(self, e: Execution, decision: Decision, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        reason = DECLINE_REASON if e.settle_to == "FAILED" else None
        settled = self.ledger.settle(e.seq, reason)
        if settled is not None:
            self.notifier.notify(settled, decision, self.faults.callback_delay_ms)


def _closed_answer(request_id: str, kind: str, closed_at: str) -> dict[str, Any]:
    """A closed request_id is FAILED for good: what executing or querying it answers."""
    return {
        "request_id": request_id,
        "kind": kind,
        "status": "FAILED",
        "reason": CLOSED_REASON,
        "closed_at": closed_at,
    }
