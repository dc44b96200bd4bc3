"""Resolution: find the real outcome of an UNKNOWN (or crashed, stale PENDING) instruction by
asking the channel about the same request_id — never by sending again."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from idempay.domain.model import Instruction, OpKind
from idempay.domain.ports import (
    Channel,
    ChannelAnswer,
    ChannelStatus,
    Clock,
    Discrepancy,
    Store,
    Tx,
    WorkQueue,
)
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

log = structlog.get_logger(__name__)
I = InstructionStatus
Note = tuple[str, dict[str, Any]] | None  # a log line to write once the transaction commits


@dataclass(frozen=True, slots=True)
class Finding:
    """What asking the channel about one instruction found: an `answer` to apply (learned by
    `how`: "query" or "close"), or, without one, `why` to ask again later (`at`, or after the
    backoff)."""

    ins: Instruction
    answer: ChannelAnswer | None = None
    how: str = "query"
    why: str = ""
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ResolutionPolicy:
    """Defaults: query after 2 s, 5 s, 10 s, 30 s, 1, 2, 5, 10 min, then every 15 min; after 20
    queries the instruction also goes to the review queue (and is still queried).

    Priority (seeds/001): an instruction of at least `urgent_amount` minor units, or of a merchant
    whose share of unresolved instructions over the last day is at least `hot_merchant_rate`, is
    claimed first and never waits longer than `urgent_cap_s` between queries; every other one
    settles on the ordinary 15-minute cadence."""

    backoff_s: tuple[float, ...] = (2, 5, 10, 30, 60, 120, 300, 600, 900)
    max_queries: int = 20
    not_found_grace_s: float = 30.0  # "never received" is believed only this long after sending
    lease_s: float = 60.0
    batch: int = 50
    query_timeout_s: float = 10.0
    urgent_amount: int = 1_000_000  # 10,000.00 in a currency with two decimals
    hot_merchant_rate: float = 0.05
    urgent_cap_s: float = 60.0

    def urgent(self, amount: int, merchant_unknown_rate: float) -> bool:
        return amount >= self.urgent_amount or merchant_unknown_rate >= self.hot_merchant_rate

    def delay_after(self, query_count: int, *, urgent: bool = False) -> float:
        """Seconds until the next query of an instruction asked `query_count` times."""
        step = self.backoff_s[min(max(query_count, 1), len(self.backoff_s)) - 1]
        return min(step, self.urgent_cap_s) if urgent else step


class Resolver:
    def __init__(
        self,
        store: Store,
        queue: WorkQueue,
        channels: Mapping[str, Channel],
        clock: Clock,
        worker_id: str,
        policy: ResolutionPolicy | None = None,
    ) -> None:
        self.store, self.queue, self.channels, self.clock = store, queue, channels, clock
        self.worker_id = worker_id
        self.policy = policy or ResolutionPolicy()
        self.actor = f"worker:{worker_id}"[:64]
        self.unknown_rates: dict[str, float] = {}  # merchant -> share unresolved (refreshed)

    def hot_merchants(self) -> list[str]:
        rate = self.policy.hot_merchant_rate
        return sorted(m for m, r in self.unknown_rates.items() if r >= rate)

    async def run_once(self, *, sweep_before: datetime | None = None) -> int:
        """Claim one batch and resolve it; the number of instructions looked at."""
        batch = await self.queue.claim_instructions(
            worker=self.worker_id,
            lease_s=self.policy.lease_s,
            limit=self.policy.batch,
            sweep_before=sweep_before,
            favour=self.hot_merchants(),
        )
        if batch:
            await self.record(await asyncio.gather(*(self.find(ins) for ins in batch)))
        return len(batch)

    async def find(self, ins: Instruction) -> Finding:
        """Ask the channel once (and close a request it never received): what to record."""
        channel = self.channels.get(ins.channel)
        if channel is None:
            return Finding(ins, why=f"channel {ins.channel} is not configured")
        answer, error = await self._ask(channel.query(OpKind(ins.kind), ins.request_id))
        if answer is None:
            return Finding(ins, why=f"query failed: {error}")
        if answer.status in (ChannelStatus.SUCCESS, ChannelStatus.FAILED):
            return Finding(ins, answer)
        if answer.status in (ChannelStatus.NOT_FOUND, ChannelStatus.CLOSED):
            return await self._not_found(channel, ins)
        return Finding(ins, why="channel: still processing")

    async def _ask(self, call: Awaitable[ChannelAnswer]) -> tuple[ChannelAnswer | None, str | None]:
        try:
            async with asyncio.timeout(self.policy.query_timeout_s):
                return await call, None
        except Exception as e:  # any failure to learn the outcome just means "ask again later"
            return None, (str(e) or type(e).__name__)[:200]

    async def _not_found(self, channel: Channel, ins: Instruction) -> Finding:
        age = (self.clock.now() - ins.created_at).total_seconds()
        if age < self.policy.not_found_grace_s:
            at = ins.created_at + timedelta(seconds=self.policy.not_found_grace_s)
            return Finding(ins, why="channel: not found (within grace)", at=at)
        closed, error = await self._ask(channel.close(OpKind(ins.kind), ins.request_id))
        if closed is None:
            return Finding(ins, why=f"close failed: {error}")
        if closed.status in (ChannelStatus.CLOSED, ChannelStatus.FAILED):
            failed = ChannelAnswer(
                ins.request_id, ChannelStatus.FAILED, reason="never received; closed"
            )
            return Finding(ins, failed, how="close")
        if closed.status is ChannelStatus.SUCCESS:  # it executed after all: closing was too late
            return Finding(ins, closed, how="close")
        return Finding(ins, why=f"close answered {closed.status}")

    async def record(self, findings: Sequence[Finding]) -> None:
        """Record findings, many per transaction, each exactly as in a transaction of its own
        (apply_outcome; every write conditional on the status seen and on this worker's lease).

        A transaction takes its findings in payment order and at most one per payment: it locks
        each payment's rows once, right after that payment's instruction, as the one-instruction
        transactions of callbacks, charges and reconciliation do, so it cannot deadlock with
        them nor with another worker's batch. A rare second live instruction of the same payment
        (two refunds, say) goes into the next transaction."""
        rounds: list[list[Finding]] = []
        seen: Counter[str] = Counter()
        for f in sorted(findings, key=lambda x: (x.ins.payment_id, x.ins.request_id)):
            n = seen[f.ins.payment_id]  # this payment's findings before this one
            seen[f.ins.payment_id] += 1
            if n == len(rounds):
                rounds.append([])
            rounds[n].append(f)
        for together in rounds:
            await self._record_together(together)

    async def _record_together(self, findings: list[Finding]) -> None:
        """In one transaction; if it fails (an unexpected InvalidState, a lost connection), each
        finding in its own instead: one instruction's failure cannot lose the others' outcomes.
        One that fails again is logged and keeps its lease: asked again once the lease is over."""
        try:
            async with self.store.begin() as tx:
                notes = await self._write_all(tx, findings)
        except Exception:
            log.warning("resolution.batch_failed", size=len(findings), exc_info=True)
            notes = []
            for f in findings:
                try:
                    async with self.store.begin() as tx:
                        mine = await self._write_all(tx, [f])
                    notes += mine
                except Exception:
                    log.exception("resolution.record_failed", request_id=f.ins.request_id)
        for note in notes:  # once committed
            if note is not None:
                log.info(note[0], **note[1])

    async def _write_all(self, tx: Tx, findings: Sequence[Finding]) -> list[Note]:
        """Each finding in turn, then the review items of those resolved closed together."""
        resolved: dict[tuple[str, str], list[str]] = defaultdict(list)  # (outcome, how) -> ids
        notes = [await self._write(tx, f, resolved) for f in findings]
        for (outcome, how), ids in resolved.items():
            await tx.close_reviews(ids, outcome, f"resolved by {how}", self.actor)
        return notes

    async def _write(self, tx: Tx, f: Finding, resolved: dict[tuple[str, str], list[str]]) -> Note:
        if f.answer is None:
            return await self._reschedule(tx, f.ins, f.why, at=f.at)
        ins, answer, how = f.ins, f.answer, f.how
        if answer.amount is not None and (answer.amount, answer.currency) != (
            ins.amount,
            ins.currency,
        ):
            await tx.add_discrepancy(self._mismatch(ins, answer))
            return await self._reschedule(tx, ins, "channel reported another amount", review=True)
        outcome = I.SUCCESS if answer.status is ChannelStatus.SUCCESS else I.FAILED
        reason = f"{how}: channel says {answer.status}" + (
            f" ({answer.reason})" if answer.reason else ""
        )
        ev = Evidence(
            outcome,
            self.actor,
            reason,
            answer.channel_txn_id,
            {"query_count": ins.query_count + 1},
            {"lease_owner": self.worker_id},
        )
        applied, now = await apply_outcome(tx, ins, ev)
        if applied in (Applied.APPLIED, Applied.SAME):  # its review item, if any, is closed
            resolved[outcome, how].append(ins.request_id)
        if applied is Applied.CONFLICT:
            await tx.add_discrepancy(self._contradiction(ins, now, answer))
        return "resolution.applied", {
            "request_id": ins.request_id,
            "merchant_id": ins.merchant_id,
            "outcome": outcome,
            "result": applied,
            "source": how,
        }

    async def _reschedule(
        self,
        tx: Tx,
        ins: Instruction,
        why: str,
        *,
        at: datetime | None = None,
        review: bool = False,
    ) -> Note:
        count = ins.query_count + 1
        urgent = self.policy.urgent(ins.amount, self.unknown_rates.get(ins.merchant_id, 0.0))
        delay = self.policy.delay_after(count, urgent=urgent)
        due = at or self.clock.now() + timedelta(seconds=delay)
        values = {
            "query_count": count,
            "next_query_at": due,
            "last_error": why[:256],
            "lease_owner": None,
            "lease_until": None,
        }
        mine = await tx.touch_instruction(
            ins.request_id, ins.status, {"lease_owner": self.worker_id}, values
        )
        if not mine:
            return "resolution.stale_answer_dropped", {"request_id": ins.request_id, "why": why}
        if review or count >= self.policy.max_queries:
            reason = why if review else f"unresolved after {count} queries: {why}"
            await tx.open_review(ins, reason)
        return None

    def _contradiction(
        self, ins: Instruction, now: Instruction, answer: ChannelAnswer
    ) -> Discrepancy:
        return Discrepancy(
            dedupe_key=f"query:{ins.request_id}:{answer.status}",
            source="query",
            cls="CONTRADICTS_TERMINAL",
            channel=ins.channel,
            request_id=ins.request_id,
            merchant_id=ins.merchant_id,
            payment_id=ins.payment_id,
            local={"status": now.status},
            remote={"status": answer.status},
        )

    def _mismatch(self, ins: Instruction, answer: ChannelAnswer) -> Discrepancy:
        return Discrepancy(
            dedupe_key=f"query-amount:{ins.request_id}",
            source="query",
            cls="AMOUNT_MISMATCH",
            channel=ins.channel,
            request_id=ins.request_id,
            merchant_id=ins.merchant_id,
            payment_id=ins.payment_id,
            local={"amount": ins.amount, "currency": ins.currency},
            remote={"amount": answer.amount, "currency": answer.currency},
        )
