"""Resolution: find the real outcome of an UNKNOWN (or crashed, stale PENDING) instruction by
asking the channel about the same request_id — never by sending again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from idempay.domain.model import Instruction, OpKind
from idempay.domain.ports import (
    Channel,
    ChannelAnswer,
    ChannelStatus,
    Clock,
    Discrepancy,
    Store,
    WorkQueue,
)
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

log = structlog.get_logger(__name__)
I = InstructionStatus


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
        await asyncio.gather(*(self.resolve(ins) for ins in batch))
        return len(batch)

    async def resolve(self, ins: Instruction) -> str:
        """Query once and act on the answer; returns what happened (for logs and tests)."""
        channel = self.channels.get(ins.channel)
        if channel is None:
            return await self._reschedule(ins, f"channel {ins.channel} is not configured")
        answer, error = await self._ask(channel.query(OpKind(ins.kind), ins.request_id))
        if answer is None:
            return await self._reschedule(ins, f"query failed: {error}")
        if answer.status in (ChannelStatus.SUCCESS, ChannelStatus.FAILED):
            return await self._apply(ins, answer, "query")
        if answer.status in (ChannelStatus.NOT_FOUND, ChannelStatus.CLOSED):
            return await self._not_found(channel, ins)
        return await self._reschedule(ins, "channel: still processing")

    async def _ask(self, call: Awaitable[ChannelAnswer]) -> tuple[ChannelAnswer | None, str | None]:
        try:
            async with asyncio.timeout(self.policy.query_timeout_s):
                return await call, None
        except Exception as e:  # any failure to learn the outcome just means "ask again later"
            return None, (str(e) or type(e).__name__)[:200]

    async def _not_found(self, channel: Channel, ins: Instruction) -> str:
        age = (self.clock.now() - ins.created_at).total_seconds()
        if age < self.policy.not_found_grace_s:
            at = ins.created_at + timedelta(seconds=self.policy.not_found_grace_s)
            return await self._reschedule(ins, "channel: not found (within grace)", at=at)
        closed, error = await self._ask(channel.close(OpKind(ins.kind), ins.request_id))
        if closed is None:
            return await self._reschedule(ins, f"close failed: {error}")
        if closed.status in (ChannelStatus.CLOSED, ChannelStatus.FAILED):
            failed = ChannelAnswer(
                ins.request_id, ChannelStatus.FAILED, reason="never received; closed"
            )
            return await self._apply(ins, failed, "close")
        if closed.status is ChannelStatus.SUCCESS:  # it executed after all: closing was too late
            return await self._apply(ins, closed, "close")
        return await self._reschedule(ins, f"close answered {closed.status}")

    async def _apply(self, ins: Instruction, answer: ChannelAnswer, how: str) -> str:
        if answer.amount is not None and (answer.amount, answer.currency) != (
            ins.amount,
            ins.currency,
        ):
            await self._record_mismatch(ins, answer)
            return await self._reschedule(ins, "channel reported another amount", review=True)
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
        async with self.store.begin() as tx:
            applied, now = await apply_outcome(tx, ins, ev)
            if applied in (Applied.APPLIED, Applied.SAME):
                await tx.close_review(ins.request_id, outcome, f"resolved by {how}", self.actor)
            if applied is Applied.CONFLICT:
                await tx.add_discrepancy(self._contradiction(ins, now, answer))
        log.info(
            "resolution.applied",
            request_id=ins.request_id,
            merchant_id=ins.merchant_id,
            outcome=outcome,
            result=applied,
            source=how,
        )
        return f"{applied}:{outcome}"

    async def _reschedule(
        self, ins: Instruction, why: str, *, at: datetime | None = None, review: bool = False
    ) -> str:
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
        async with self.store.begin() as tx:
            mine = await tx.touch_instruction(
                ins.request_id, ins.status, {"lease_owner": self.worker_id}, values
            )
            if mine and (review or count >= self.policy.max_queries):
                reason = why if review else f"unresolved after {count} queries: {why}"
                await tx.open_review(ins, reason)
        if not mine:
            log.info("resolution.stale_answer_dropped", request_id=ins.request_id, why=why)
            return "lost-lease"
        return "rescheduled"

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

    async def _record_mismatch(self, ins: Instruction, answer: ChannelAnswer) -> None:
        async with self.store.begin() as tx:
            await tx.add_discrepancy(
                Discrepancy(
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
            )
