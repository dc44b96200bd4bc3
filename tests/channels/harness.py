"""One contract, two channels: what the contract suite needs to drive and observe a channel,
implemented over the in-process ScriptedChannel and over SimbankChannel + its subprocess."""

from __future__ import annotations

import secrets
from typing import Protocol

from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.channels.simbank import SimbankChannel
from idempay.domain.errors import Declined
from idempay.domain.model import OpKind
from idempay.domain.ports import Channel, ChannelAnswer, ChannelOp, ChannelStatus
from tests.channels.receiver import Receiver
from tests.simbank_proc import SimbankProcess


def new_op(
    kind: OpKind = OpKind.PAY,
    *,
    amount: int = 19900,
    notify_url: str | None = None,
    payment_ref: str | None = None,
) -> ChannelOp:
    return ChannelOp(
        request_id=f"req_{secrets.token_hex(8)}",
        kind=kind,
        payment_ref=payment_ref or f"pay_{secrets.token_hex(8)}",
        amount=amount,
        currency="CNY",
        notify_url=notify_url,
        receiver_id="distributor-7" if kind is OpKind.SPLIT else None,
    )


async def outcome(channel: Channel, op: ChannelOp) -> ChannelAnswer:
    """execute, with a Declined turned into the FAILED answer it stands for."""
    try:
        return await channel.execute(op)
    except Declined as e:
        return ChannelAnswer(op.request_id, ChannelStatus.FAILED, reason=e.detail)


class Harness(Protocol):
    channel: Channel
    secret: str

    def op(self, kind: OpKind = OpKind.PAY) -> ChannelOp: ...

    def executions(self, request_id: str) -> list[tuple[str, str]]:
        """(kind, status) of every execution of `request_id` in the channel's ledger."""
        ...

    def set_idempotency(self, on: bool) -> None: ...

    def decline_from_now(self) -> None: ...

    async def callback_for(self, op: ChannelOp) -> tuple[dict[str, str], bytes]:
        """Headers and body of the callback announcing the outcome of executed `op`."""
        ...


class ScriptedHarness:
    def __init__(self, channel: ScriptedChannel) -> None:
        self.channel = self.scripted = channel
        self.secret = channel.secret

    def op(self, kind: OpKind = OpKind.PAY) -> ChannelOp:
        return new_op(kind)

    def executions(self, request_id: str) -> list[tuple[str, str]]:
        return [(e.kind, e.status) for e in self.scripted.ledger if e.request_id == request_id]

    def set_idempotency(self, on: bool) -> None:
        self.scripted.idempotency = on

    def decline_from_now(self) -> None:
        self.scripted.default = Behavior.DECLINE

    async def callback_for(self, op: ChannelOp) -> tuple[dict[str, str], bytes]:
        return self.scripted.signed_callback(op.request_id)


class SimbankHarness:
    def __init__(self, channel: SimbankChannel, sim: SimbankProcess, receiver: Receiver) -> None:
        self.channel = channel
        self.sim = sim
        self.receiver = receiver
        self.secret = sim.secret

    def op(self, kind: OpKind = OpKind.PAY) -> ChannelOp:
        return new_op(kind, notify_url=self.receiver.url)

    def executions(self, request_id: str) -> list[tuple[str, str]]:
        return [(e["kind"], e["status"]) for e in self.sim.executions(request_id)]

    def set_idempotency(self, on: bool) -> None:
        self.sim.faults(idempotency=on)

    def decline_from_now(self) -> None:
        self.sim.faults(decline_rate=1)

    async def callback_for(self, op: ChannelOp) -> tuple[dict[str, str], bytes]:
        for n in range(1, 10):
            delivery = (await self.receiver.wait_for(n))[-1]
            if delivery.json["request_id"] == op.request_id:
                return delivery.headers, delivery.body
        raise AssertionError(f"no callback for {op.request_id}")
