"""An in-process scripted channel: answers as told, records every execution in its ledger.

It is the test double of the Channel port, shipped in the package (like structlog.testing) so
tests, benchmarks and sandboxes can drive outcomes deterministically, including the half-open
case where the channel executes and the answer is lost. Its callbacks use simbank's wire format
and signature (`signed_callback` makes one).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from idempay.channels.simbank import parse_callback
from idempay.domain.errors import Declined, NotSent, OutcomeUnknown
from idempay.domain.model import OpKind
from idempay.domain.ports import (
    ChannelAnswer,
    ChannelNotification,
    ChannelOp,
    ChannelStatus,
    StatementLine,
)
from idempay.simbank.signing import signed_headers

DEFAULT_SECRET = "scripted-secret"


class Behavior(StrEnum):
    SUCCEED = "SUCCEED"  # execute, answer SUCCESS
    DECLINE = "DECLINE"  # do not execute, answer a business decline
    PENDING = "PENDING"  # accept, answer PROCESSING; settle later with settle()
    HALF_OPEN = "HALF_OPEN"  # execute (SUCCESS), then lose the answer: OutcomeUnknown
    ERROR = "ERROR"  # 5xx without executing: OutcomeUnknown
    REFUSED = "REFUSED"  # connection refused: NotSent


@dataclass(frozen=True, slots=True)
class Execution:
    """One row of the ledger: an operation the channel executed (or accepted)."""

    request_id: str
    kind: str
    payment_ref: str
    amount: int
    currency: str
    status: str
    txn_id: str
    executed_at: str
    receiver_id: str | None = None


class ScriptedChannel:
    """Answers from a queue of behaviours (then `default`); idempotent on request_id unless told
    otherwise; thread-safe, so it can serve many event loops in many threads at once."""

    def __init__(
        self,
        name: str = "scripted",
        *,
        default: Behavior = Behavior.SUCCEED,
        delay_s: float = 0.0,
        idempotency: bool = True,
        ledger_path: Path | None = None,
        after_execute: Callable[[ChannelOp], None] | None = None,
        secret: str = DEFAULT_SECRET,
    ) -> None:
        self.name = name
        self.secret = secret
        self.default = default
        self.delay_s = delay_s
        self.idempotency = idempotency
        self.ledger_path = ledger_path
        self.after_execute = after_execute
        self.ledger: list[Execution] = []
        self.calls = 0
        self._plan: deque[Behavior] = deque()
        self._status: dict[str, Execution] = {}
        self._closed: set[str] = set()
        self._lock = threading.Lock()

    def plan(self, *behaviors: Behavior) -> None:
        with self._lock:
            self._plan.extend(behaviors)

    def executions(
        self, payment_ref: str | None = None, kind: OpKind = OpKind.PAY
    ) -> list[Execution]:
        with self._lock:
            return [
                e
                for e in self.ledger
                if e.kind == kind and (payment_ref is None or e.payment_ref == payment_ref)
            ]

    async def execute(self, op: ChannelOp) -> ChannelAnswer:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        with self._lock:
            self.calls += 1
            behavior = self._plan.popleft() if self._plan else self.default
            if behavior is Behavior.REFUSED:
                raise NotSent("connection refused")
            if behavior is Behavior.ERROR:
                raise OutcomeUnknown("503 from channel")
            if op.request_id in self._closed:
                return ChannelAnswer(op.request_id, ChannelStatus.FAILED, reason="CLOSED")
            first = self._status.get(op.request_id)
            if first is not None and self.idempotency:
                return self._answer(first)
            if behavior is Behavior.DECLINE:
                raise Declined("INSUFFICIENT_FUNDS")
            status = "PROCESSING" if behavior is Behavior.PENDING else "SUCCESS"
            execution = self._record(op, status)
        if self.after_execute is not None:
            self.after_execute(op)
        if behavior is Behavior.HALF_OPEN:
            raise OutcomeUnknown("connection reset after sending")
        return self._answer(execution)

    async def query(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        with self._lock:
            e = self._status.get(request_id)
            if e is None:
                status = (
                    ChannelStatus.FAILED if request_id in self._closed else ChannelStatus.NOT_FOUND
                )
                return ChannelAnswer(request_id, status)
            return self._answer(e)

    async def close(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        with self._lock:
            e = self._status.get(request_id)
            if e is not None:  # executed: closing is too late, answer what happened
                return self._answer(e)
            self._closed.add(request_id)
            return ChannelAnswer(request_id, ChannelStatus.CLOSED)

    def settle(self, request_id: str, status: str) -> None:
        """Finish an operation that answered PROCESSING."""
        with self._lock:
            e = self._status[request_id]
            settled = Execution(**{**asdict(e), "status": status})
            self._status[request_id] = settled
            self.ledger[self.ledger.index(e)] = settled

    async def statement(self, day: date) -> list[StatementLine]:
        """Every execution whose executed_at falls on `day` (UTC), oldest first."""
        with self._lock:
            ledger = list(self.ledger)
        lines = [_line(e) for e in ledger]
        return [line for line in lines if line.executed_at.astimezone(UTC).date() == day]

    def verify_callback(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ChannelNotification:
        """Checks a callback as simbank's adapter does (signature with `secret`, then parse)."""
        return parse_callback(self.secret, headers, body, now)

    def callback_ack(self) -> tuple[int, dict[str, Any]]:
        return 200, {"code": "SUCCESS"}

    def signed_callback(
        self, request_id: str, *, now: datetime | None = None, notify_id: str | None = None
    ) -> tuple[dict[str, str], bytes]:
        """Headers and body of a callback announcing the current status of `request_id`, signed
        with `secret` at `now` (for tests of the callback path)."""
        with self._lock:
            e = self._status[request_id]
        timestamp = int((now or datetime.now(UTC)).timestamp())
        payload = {
            "notify_id": notify_id or f"ntf_{secrets.token_hex(12)}",
            "request_id": e.request_id,
            "kind": e.kind,
            "payment_ref": e.payment_ref,
            "receiver_id": e.receiver_id,
            "amount": e.amount,
            "currency": e.currency,
            "status": e.status,
            "reason": None,
            "channel_txn_id": e.txn_id,
            "executed_at": e.executed_at,
            "timestamp": timestamp,
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        return signed_headers(self.secret, body, timestamp), body

    def _record(self, op: ChannelOp, status: str) -> Execution:
        e = Execution(
            request_id=op.request_id,
            kind=op.kind.value,
            payment_ref=op.payment_ref,
            amount=op.amount,
            currency=op.currency,
            status=status,
            txn_id=f"sc{len(self.ledger) + 1:08d}",
            executed_at=datetime.now(UTC).isoformat(),
            receiver_id=op.receiver_id,
        )
        self.ledger.append(e)
        self._status.setdefault(op.request_id, e)
        if self.ledger_path is not None:
            with self.ledger_path.open("a") as f:
                f.write(json.dumps(asdict(e)) + "\n")
                f.flush()
        return e

    @staticmethod
    def _answer(e: Execution) -> ChannelAnswer:
        return ChannelAnswer(e.request_id, ChannelStatus(e.status), e.amount, e.currency, e.txn_id)


def _line(e: Execution) -> StatementLine:
    return StatementLine(
        request_id=e.request_id,
        kind=OpKind(e.kind),
        payment_ref=e.payment_ref,
        amount=e.amount,
        currency=e.currency,
        status=ChannelStatus(e.status),
        channel_txn_id=e.txn_id,
        executed_at=datetime.fromisoformat(e.executed_at),
        receiver_id=e.receiver_id,
    )
