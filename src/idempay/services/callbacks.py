"""Channel callbacks: deduplicated by (channel, notify_id), checked against the instruction,
applied by the same CAS as every other evidence. Signature checks happen before this, in the
channel's adapter; what reaches here is a verified notification."""

from __future__ import annotations

import json
from dataclasses import asdict

import structlog

from idempay.domain.errors import DuplicateKey
from idempay.domain.model import Instruction
from idempay.domain.ports import ChannelNotification, ChannelStatus, Discrepancy, Store, Tx
from idempay.domain.states import InstructionStatus
from idempay.services.outcomes import Applied, Evidence, apply_outcome

log = structlog.get_logger(__name__)

DUPLICATE = "DUPLICATE"
APPLIED = "APPLIED"
NOOP = "NOOP"
DISCREPANCY = "DISCREPANCY"


class Callbacks:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def receive(self, channel: str, n: ChannelNotification) -> str:
        """Record and apply one notification; the result says what it did. The inbox row and
        the transition commit together, so a crash never applies without recording or v.v."""
        body = json.dumps(asdict(n), sort_keys=True, default=str)
        try:
            async with self.store.begin() as tx:
                await tx.insert_inbox(channel, n.notify_id, n.request_id, "RECEIVED", body)
                result = await self._apply(tx, channel, n)
                await tx.set_inbox_result(channel, n.notify_id, result)
        except DuplicateKey:
            log.info("callback.duplicate", channel=channel, notify_id=n.notify_id)
            return DUPLICATE
        log.info(
            "callback.received",
            channel=channel,
            notify_id=n.notify_id,
            request_id=n.request_id,
            status=n.status,
            result=result,
        )
        return result

    async def _apply(self, tx: Tx, channel: str, n: ChannelNotification) -> str:
        ins = await tx.get_instruction(n.request_id)
        if ins is None or ins.channel != channel:
            await tx.add_discrepancy(self._discrepancy("UNKNOWN_REQUEST", channel, n, None))
            return DISCREPANCY
        if (n.amount, n.currency) != (ins.amount, ins.currency):
            await tx.add_discrepancy(self._discrepancy("AMOUNT_MISMATCH", channel, n, ins))
            return DISCREPANCY
        if n.status not in (ChannelStatus.SUCCESS, ChannelStatus.FAILED):
            return NOOP
        outcome = InstructionStatus(n.status.value)
        ev = Evidence(outcome, f"channel:{channel}", f"callback {n.notify_id}", n.channel_txn_id)
        for _ in range(3):  # MOVED: another non-terminal change landed first; judge again
            applied, ins = await apply_outcome(tx, ins, ev)
            if applied is not Applied.MOVED:
                break
        if applied is Applied.CONFLICT:
            await tx.add_discrepancy(self._discrepancy("CONTRADICTS_TERMINAL", channel, n, ins))
            return DISCREPANCY
        if applied is Applied.APPLIED:
            await tx.close_review(ins.request_id, outcome, "resolved by callback", ev.actor)
        return APPLIED if applied is Applied.APPLIED else NOOP

    @staticmethod
    def _discrepancy(
        cls: str, channel: str, n: ChannelNotification, ins: Instruction | None
    ) -> Discrepancy:
        local = (
            {"status": ins.status, "amount": ins.amount, "currency": ins.currency} if ins else {}
        )
        return Discrepancy(
            dedupe_key=f"callback:{channel}:{n.notify_id}",
            source="callback",
            cls=cls,
            channel=channel,
            request_id=n.request_id,
            merchant_id=ins.merchant_id if ins else None,
            payment_id=ins.payment_id if ins else n.payment_ref,
            local=local,
            remote={
                "status": n.status,
                "amount": n.amount,
                "currency": n.currency,
                "notify_id": n.notify_id,
            },
        )
