"""Shared pieces of the settlement tests: a manual-clock container, wrapper channels."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.domain.errors import OutcomeUnknown
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelAnswer, ChannelOp
from idempay.services.payments import ChargeCommand


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs (not even `except Exception`)."""


def cmd(biz_no: str = "PAY_1", amount: int = 19900, notify_url: str | None = None) -> ChargeCommand:
    return ChargeCommand(biz_no, "ORD001", amount, "CNY", "scripted", notify_url=notify_url)


async def build(
    url: str, channel: object, clock: ManualClock, **settings: object
) -> bootstrap.Container:
    conf = Settings(database_url=url, channel_timeout_s=2.0, **settings)  # type: ignore[arg-type]
    return await bootstrap.build(conf, clock=clock, channels={"scripted": channel})  # type: ignore[dict-item]


@dataclass
class Wrapped:
    """A channel around a ScriptedChannel whose steps a test can intercept."""

    inner: ScriptedChannel
    name: str = "scripted"
    before_execute: Callable[[ChannelOp], None] | None = None
    query_error: bool = False
    query_gate: asyncio.Event | None = None
    queries: list[str] = field(default_factory=list)
    in_flight: set[str] = field(default_factory=set)
    overlaps: list[str] = field(default_factory=list)
    query_delay_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def execute(self, op: ChannelOp) -> ChannelAnswer:
        if self.before_execute is not None:
            self.before_execute(op)
        return await self.inner.execute(op)

    async def query(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        with self._lock:
            self.queries.append(request_id)
            if request_id in self.in_flight:
                self.overlaps.append(request_id)
            self.in_flight.add(request_id)
        try:
            if self.query_error:
                raise OutcomeUnknown("query timed out")
            answer = await self.inner.query(kind, request_id)  # what the channel says now...
            if self.query_delay_s:
                await asyncio.sleep(self.query_delay_s)
            if self.query_gate is not None:  # ...arrives only when the test lets it
                await self.query_gate.wait()
            return answer
        finally:
            with self._lock:
                self.in_flight.discard(request_id)

    async def close(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        return await self.inner.close(kind, request_id)


def crash_before_sending(_op: ChannelOp) -> None:
    raise Crash


def crash_after(inner: ScriptedChannel) -> None:
    def die(_op: ChannelOp) -> None:
        raise Crash

    inner.after_execute = die
