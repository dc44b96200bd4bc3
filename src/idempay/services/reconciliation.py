"""Statement reconciliation: the channel's daily statement against our books — the last line of
defence, which sees what idempotency cannot (lost answers, a channel that charged twice).

Safe corrections are automatic and go through the normal paths: a local UNKNOWN/PENDING that the
channel settled is applied by CAS; an extra charge is refunded with a refund_no derived from the
charge itself. Everything else becomes a review item. Re-running a day changes nothing twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

import structlog

from idempay.domain.errors import IdempayError, InvalidRequest
from idempay.domain.model import Instruction, OpKind, Payment
from idempay.domain.ports import Channel, ChannelStatus, Clock, Discrepancy, StatementLine, Store
from idempay.domain.states import InstructionStatus, PaymentStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome
from idempay.services.refunds import Refunds

log = structlog.get_logger(__name__)
I = InstructionStatus
CLASSES = (
    "MATCH",
    "MISSING_LOCAL",
    "MISSING_AT_CHANNEL",
    "STATUS_MISMATCH",
    "AMOUNT_MISMATCH",
    "DUPLICATE_CHARGE",
)
LIVE = {I.PENDING, I.PROCESSING, I.UNKNOWN}


class ReconciliationStore(Protocol):
    async def instructions(self, request_ids: list[str]) -> dict[str, Instruction]: ...
    async def payments(self, payment_ids: list[str]) -> dict[str, Payment]: ...
    async def successes_between(
        self, channel: str, start: datetime, end: datetime
    ) -> list[Instruction]: ...
    async def earlier_findings(
        self, channel: str, request_ids: list[str]
    ) -> dict[str, list[dict[str, Any]]]: ...
    async def create_run(
        self, channel: str, day: str, schedule_key: str | None = None
    ) -> str | None: ...
    async def finish_run(
        self,
        run_id: str,
        status: str,
        counts: dict[str, int],
        found: list[dict[str, Any]],
        error: str | None = None,
    ) -> None: ...
    async def get_run(self, run_id: str) -> dict[str, Any] | None: ...


@dataclass
class Finding:
    cls: str
    line: StatementLine | None
    ins: Instruction | None
    correction: str = ""
    key_suffix: str = ""

    @property
    def request_id(self) -> str | None:
        return self.line.request_id if self.line else (self.ins.request_id if self.ins else None)


@dataclass
class _Day:
    run_id: str
    channel: str
    findings: list[Finding] = field(default_factory=list)


def _local(ins: Instruction | None) -> dict[str, Any]:
    if ins is None:
        return {}
    return {
        "request_id": ins.request_id,
        "kind": ins.kind,
        "status": ins.status,
        "amount": ins.amount,
        "currency": ins.currency,
        "payment_id": ins.payment_id,
    }


def _remote(line: StatementLine | None) -> dict[str, Any]:
    if line is None:
        return {}
    return {
        "request_id": line.request_id,
        "kind": line.kind.value,
        "status": line.status.value,
        "amount": line.amount,
        "currency": line.currency,
        "payment_ref": line.payment_ref,
        "channel_txn_id": line.channel_txn_id,
        "executed_at": line.executed_at.isoformat(),
    }


class Reconciliation:
    def __init__(
        self,
        store: Store,
        books: ReconciliationStore,
        channels: Mapping[str, Channel],
        clock: Clock,
        refunds: Refunds,
    ) -> None:
        self.store, self.books, self.channels, self.clock, self.refunds = (
            store,
            books,
            channels,
            clock,
            refunds,
        )

    async def start(
        self, channel: str, day: date, *, schedule_key: str | None = None
    ) -> str | None:
        if channel not in self.channels:
            raise InvalidRequest(f"unknown channel {channel!r}", field="channel")
        return await self.books.create_run(channel, day.isoformat(), schedule_key)

    async def run(self, run_id: str, channel: str, day: date) -> dict[str, Any]:
        """Reconcile one channel and one UTC day into the run `run_id`; the finished run."""
        try:
            lines = await self.channels[channel].statement(day)
            state = _Day(run_id, channel)
            await self._classify(state, lines, day)
            await self._correct(state)
            counts = Counter({c: 0 for c in CLASSES})
            counts.update(f.cls for f in state.findings)
            found = [self._entry(f) for f in state.findings if f.cls != "MATCH"]
            await self.books.finish_run(run_id, "DONE", dict(counts), found)
        except Exception as e:
            log.exception("reconciliation.failed", run_id=run_id, channel=channel, day=str(day))
            await self.books.finish_run(
                run_id, "FAILED", {}, [], (str(e) or type(e).__name__)[:500]
            )
        run = await self.books.get_run(run_id)
        assert run is not None
        return run

    # --- classification --------------------------------------------------------------------

    async def _classify(self, state: _Day, lines: list[StatementLine], day: date) -> None:
        local = await self.books.instructions([ln.request_id for ln in lines])
        payments = await self.books.payments([ln.payment_ref for ln in lines])
        earlier = await self.books.earlier_findings(state.channel, [ln.request_id for ln in lines])
        seen: set[str] = set()
        charged: dict[str, list[StatementLine]] = defaultdict(list)
        for ln in lines:
            repeat = ln.request_id in seen
            seen.add(ln.request_id)
            ins = local.get(ln.request_id)
            if ln.kind is OpKind.PAY and ln.status is ChannelStatus.SUCCESS:
                charged[ln.payment_ref].append(ln)
            state.findings.append(
                self._judge(ln, ins, payments.get(ln.payment_ref), repeat, earlier)
            )
        start = datetime.combine(day, time(), UTC)
        for ins in await self.books.successes_between(
            state.channel, start, start + timedelta(days=1)
        ):
            if ins.request_id not in seen:
                state.findings.append(Finding("MISSING_AT_CHANNEL", None, ins))

    def _judge(
        self,
        ln: StatementLine,
        ins: Instruction | None,
        payment: Payment | None,
        repeat: bool,
        earlier: dict[str, list[dict[str, Any]]],
    ) -> Finding:
        if self._extra_charge(ln, ins, payment, repeat):
            return Finding("DUPLICATE_CHARGE", ln, ins, key_suffix=ln.channel_txn_id or "")
        if ins is None:
            return Finding("MISSING_LOCAL", ln, None, key_suffix=ln.channel_txn_id or "")
        if (ln.amount, ln.currency) != (ins.amount, ins.currency) or ln.kind.value != ins.kind:
            return Finding("AMOUNT_MISMATCH", ln, ins)
        agrees = ln.status.value == ins.status or (
            ln.status is ChannelStatus.PROCESSING and ins.status in LIVE
        )
        if not agrees:
            return Finding("STATUS_MISMATCH", ln, ins)
        if any(e["class"] == "STATUS_MISMATCH" for e in earlier.get(ln.request_id, [])):
            return Finding("STATUS_MISMATCH", ln, ins, "corrected by an earlier run")
        return Finding("MATCH", ln, ins)

    @staticmethod
    def _extra_charge(
        ln: StatementLine, ins: Instruction | None, payment: Payment | None, repeat: bool
    ) -> bool:
        """A successful charge beyond the one the payment has: the same request_id executed a
        second time (a channel whose idempotency failed), or a charge of a payment that has
        succeeded through another instruction."""
        if ln.kind is not OpKind.PAY or ln.status is not ChannelStatus.SUCCESS or payment is None:
            return False
        if repeat:
            return True
        if payment.status != PaymentStatus.SUCCESS:
            return False
        return ins is None or ins.payment_id != payment.id or ins.status != I.SUCCESS

    # --- corrections -----------------------------------------------------------------------

    async def _correct(self, state: _Day) -> None:
        for f in state.findings:
            if f.cls == "MATCH" or f.correction:
                continue
            d = self._discrepancy(state, f)
            if (
                f.cls == "STATUS_MISMATCH"
                and f.ins is not None
                and f.ins.status in LIVE
                and f.line is not None
            ):
                f.correction = await self._apply(state, f)
            elif f.cls == "DUPLICATE_CHARGE" and f.line is not None:
                f.correction = await self._refund_extra(state, f)
            else:
                f.correction = "review"
            async with self.store.begin() as tx:
                await tx.add_discrepancy(d)
                if f.correction == "review":
                    await tx.open_discrepancy_review(d, f"reconciliation {state.run_id}: {f.cls}")

    async def _apply(self, state: _Day, f: Finding) -> str:
        assert f.ins is not None and f.line is not None
        outcome = I.SUCCESS if f.line.status is ChannelStatus.SUCCESS else I.FAILED
        actor = f"reconciliation:{state.run_id}"
        ev = Evidence(
            outcome, actor, f"statement of the channel says {outcome}", f.line.channel_txn_id
        )
        async with self.store.begin() as tx:
            applied, _ = await apply_outcome(tx, f.ins, ev)
            if applied in (Applied.APPLIED, Applied.SAME):
                await tx.close_review(
                    f.ins.request_id, outcome, "resolved by reconciliation", actor
                )
        return f"applied {outcome}" if applied in (Applied.APPLIED, Applied.SAME) else "review"

    async def _refund_extra(self, state: _Day, f: Finding) -> str:
        assert f.line is not None
        payment = await self.store.get_payment_by_id(f.line.payment_ref)
        if payment is None:
            return "review"
        refund_no = f"dup-{f.line.channel_txn_id or f.line.request_id}"[:64]
        try:
            result = await self.refunds.return_extra_charge(
                payment,
                refund_no,
                f.line.amount,
                f"duplicate charge {f.line.channel_txn_id}",
                f"reconciliation:{state.run_id}",
            )
        except IdempayError as e:
            log.warning("reconciliation.refund_failed", refund_no=refund_no, error=e.code)
            return "review"
        return f"refund {refund_no} {result.view.refund.status}"

    def _discrepancy(self, state: _Day, f: Finding) -> Discrepancy:
        ins, ln = f.ins, f.line
        return Discrepancy(
            dedupe_key=f"recon:{state.channel}:{f.cls}:{f.request_id}:{f.key_suffix}",
            source="reconciliation",
            cls=f.cls,
            channel=state.channel,
            request_id=f.request_id,
            merchant_id=ins.merchant_id if ins else None,
            payment_id=ins.payment_id if ins else (ln.payment_ref if ln else None),
            local=_local(ins),
            remote=_remote(ln),
            run_id=state.run_id,
        )

    @staticmethod
    def _entry(f: Finding) -> dict[str, Any]:
        kind = f.line.kind.value if f.line else (f.ins.kind if f.ins else None)
        return {
            "class": f.cls,
            "request_id": f.request_id,
            "kind": kind,
            "local": _local(f.ins),
            "channel": _remote(f.line),
            "correction": f.correction,
        }
