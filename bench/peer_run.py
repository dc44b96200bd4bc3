"""The peer measurement, in its own process (`python -m bench.peer_run '<json>'`): Powertools for
AWS Lambda (Python) idempotency on its Redis persistence layer against idempay, both wrapping the
same instant channel call (`ScriptedChannel.execute`), one client in one thread, interleaved
round by round. The result is written as JSON to spec["out"].

- Powertools: `@idempotent_function` with `CachePersistenceLayer(host, port, ssl=False)` (its
  Redis layer; the default `ssl=True` hangs against a plain local Redis), the key taken from the
  payload's `idempotency_key`, records kept 24 h (idempay's key TTL), and a registered Lambda
  context whose remaining time (15 s: idempay's channel deadline + its in-flight margin) becomes
  each record's in-progress expiry. No payload validation: with the Redis layer it refuses every
  identical repeat of a completed key (see `Powertools.demo`). A fresh key prefix per run. The
  decorator is synchronous: the wrapped function drives the channel's coroutine to its end in
  the calling thread (`_run_to_end`): `ScriptedChannel.execute` without a delay never suspends,
  so this is the same call, without the cost of an event loop.
- idempay: `POST /v1/payments` through the real FastAPI app in-process (httpx.AsyncClient over
  ASGITransport, no socket), on PostgreSQL and on SQLite, a new biz_no and Idempotency-Key each
  call, then the same requests again (same key, same body).

Then, once, the checks that show what each does when a call dies after the channel executed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import time
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

from bench.figures import percentile
from idempay import bootstrap, logs
from idempay.api.app import create_app
from idempay.channels.scripted import Behavior, ScriptedChannel
from idempay.clock import ManualClock
from idempay.config import Settings
from idempay.domain.errors import OutcomeUnknown
from idempay.domain.model import OpKind, new_id
from idempay.domain.ports import ChannelOp

CHANNEL = "simbank"
AMOUNT, CURRENCY = 19900, "CNY"
KEY_TTL_S = 24 * 3600  # idempay's default IDEMPAY_IDEMPOTENCY_TTL_S
IN_PROGRESS_MS = 15_000  # idempay's in-flight window: channel deadline 10 s + 5 s margin
T = TypeVar("T")


@dataclass
class Tally:
    """One measured run of one case."""

    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_s: float = 0.0
    channel_calls: int = 0  # ScriptedChannel.execute calls during the run
    bad: int = 0  # answers that were not the expected one

    def result(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        n = len(lat)
        return {
            "calls": n,
            "rate": n / self.seconds if self.seconds else 0.0,
            "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000,
            "cpu_us_per_call": self.cpu_s / n * 1e6 if n else 0.0,
            "channel_calls": self.channel_calls,
            "bad": self.bad,
        }


def _run_to_end(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end in this thread, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("the channel call suspended: it needs an event loop")


class LambdaContext:
    """What the idempotency utility reads of a Lambda context: the remaining time, which becomes
    the in-progress expiry of the record written before the function runs."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Killed(BaseException):
    """The process dies (a Lambda killed at its timeout, an OOM kill) after the channel executed:
    no `except Exception` runs, so nothing is recorded or cleaned up."""


def _kill(_op: ChannelOp) -> None:
    raise Killed


def _payment(tag: str, i: int) -> dict[str, Any]:
    return {
        "idempotency_key": f"K{tag}-{i}",
        "biz_no": f"B{tag}-{i}",
        "order_no": f"O{tag}-{i}",
        "amount": AMOUNT,
        "currency": CURRENCY,
    }


# --- Powertools ----------------------------------------------------------------------------------


class Powertools:
    def __init__(self, host: str, port: int, prefix: str) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.channel = ScriptedChannel(CHANNEL)
        self.layers: list[Any] = []

    def charger(
        self, tag: str, remaining_ms: int = IN_PROGRESS_MS, *, validate: bool = False
    ) -> Callable[..., Any]:
        """A new idempotent charge function with its own persistence layer and key prefix;
        `validate`: refuse a reused key with another payment (payload_validation_jmespath)."""
        with warnings.catch_warnings():  # RedisCachePersistenceLayer's rename warning
            warnings.simplefilter("ignore", DeprecationWarning)
            layer = CachePersistenceLayer(host=self.host, port=self.port, ssl=False)
        self.layers.append(layer)
        config = IdempotencyConfig(
            event_key_jmespath="idempotency_key",
            payload_validation_jmespath="[biz_no, amount, currency]" if validate else "",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=KEY_TTL_S,
        )
        config.register_lambda_context(LambdaContext(remaining_ms))  # type: ignore[arg-type]
        channel = self.channel

        @idempotent_function(
            data_keyword_argument="payment",
            persistence_store=layer,
            config=config,
            key_prefix=f"{self.prefix}{tag}",
        )
        def charge(*, payment: dict[str, Any]) -> dict[str, Any]:
            op = ChannelOp(
                new_id("req", datetime.now(UTC)),
                OpKind.PAY,
                payment["biz_no"],
                payment["amount"],
                payment["currency"],
            )
            answer = _run_to_end(channel.execute(op))
            return {
                "request_id": answer.request_id,
                "status": str(answer.status),
                "amount": answer.amount,
                "currency": answer.currency,
                "channel_txn_id": answer.channel_txn_id,
            }

        return charge

    def run_new(self, tag: str, seconds: float) -> tuple[Tally, list[tuple[dict[str, Any], Any]]]:
        charge = self.charger(tag)
        tally, done = Tally(), []
        calls0, cpu0 = self.channel.calls, time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        i = 0
        while (s := time.perf_counter()) < end:
            payment = _payment(tag, i)
            answer = charge(payment=payment)
            tally.latencies.append(time.perf_counter() - s)
            tally.bad += answer["status"] != "SUCCESS"
            done.append((payment, answer))
            i += 1
        tally.seconds = time.perf_counter() - t0
        tally.cpu_s = time.process_time() - cpu0
        tally.channel_calls = self.channel.calls - calls0
        self._charge = charge
        return tally, done

    def run_repeat(self, done: list[tuple[dict[str, Any], Any]], seconds: float) -> Tally:
        charge = self._charge  # the same function, prefix and persistence layer as run_new
        tally = Tally()
        calls0, cpu0 = self.channel.calls, time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        i = 0
        while (s := time.perf_counter()) < end:
            payment, first = done[i % len(done)]
            answer = charge(payment=payment)
            tally.latencies.append(time.perf_counter() - s)
            tally.bad += answer != first
            i += 1
        tally.seconds = time.perf_counter() - t0
        tally.cpu_s = time.process_time() - cpu0
        tally.channel_calls = self.channel.calls - calls0
        return tally

    def demo(self) -> dict[str, Any]:
        """Dies after the channel executed (0.3 s in-progress expiry), and the channel executes
        but its answer is lost (an exception): what the same key gets afterwards."""
        out: dict[str, Any] = {}
        ch = self.channel

        charge = self.charger("demo-kill", remaining_ms=300)
        payment = _payment("demo-kill", 0)
        ch.after_execute = _kill
        try:
            charge(payment=payment)
        except Killed:
            pass
        finally:
            ch.after_execute = None
        try:
            charge(payment=payment)
            out["kill_retry_at_once"] = "answered"
        except IdempotencyAlreadyInProgressError:
            out["kill_retry_at_once"] = "IdempotencyAlreadyInProgressError"
        out["kill_executions_before_expiry"] = len(ch.executions(payment["biz_no"]))
        time.sleep(0.4)
        out["kill_retry_after_expiry"] = charge(payment=payment)["status"]
        out["kill_executions"] = len(ch.executions(payment["biz_no"]))

        charge = self.charger("demo-lost")
        payment = _payment("demo-lost", 0)
        ch.plan(Behavior.HALF_OPEN)
        try:
            charge(payment=payment)
            out["lost_first"] = "answered"
        except OutcomeUnknown:
            out["lost_first"] = "OutcomeUnknown"
        out["lost_retry"] = charge(payment=payment)["status"]
        out["lost_executions"] = len(ch.executions(payment["biz_no"]))

        # Payload validation on the Redis layer: the completed record is written without the
        # validation hash, so the identical repeat is refused.
        charge = self.charger("demo-validate", validate=True)
        payment = _payment("demo-validate", 0)
        charge(payment=payment)
        try:
            out["validate_repeat"] = charge(payment=payment)["status"]
        except Exception as e:
            out["validate_repeat"] = type(e).__name__
        out["validate_executions"] = len(ch.executions(payment["biz_no"]))
        return out

    def redis_facts(self) -> dict[str, Any]:
        client = self.layers[0].client
        return {
            "save": client.config_get("save").get("save"),
            "appendonly": client.config_get("appendonly").get("appendonly"),
            "version": client.info("server").get("redis_version"),
        }

    def cleanup(self) -> int:
        client = self.layers[0].client
        keys = list(client.scan_iter(match=f"{self.prefix}*", count=1000))
        for lo in range(0, len(keys), 1000):
            client.delete(*keys[lo : lo + 1000])
        for layer in self.layers:
            layer.client.close()
        return len(keys)


# --- idempay -------------------------------------------------------------------------------------


class Idempay:
    """The FastAPI app over a container with its own ScriptedChannel, called in-process."""

    def __init__(self, database_url: str, clock: ManualClock | None = None) -> None:
        self.database_url = database_url
        self.clock = clock
        self.channel = ScriptedChannel(CHANNEL)

    async def start(self) -> None:
        settings = Settings(database_url=self.database_url, log_format="json")
        self.container = await bootstrap.build(
            settings, clock=self.clock, channels={CHANNEL: self.channel}
        )
        _, api_key = await bootstrap.create_principal(
            self.container.store, f"peer-{secrets.token_hex(3)}", operator=False
        )
        self.auth = {"Authorization": f"Bearer {api_key}"}
        transport = httpx.ASGITransport(app=create_app(self.container))
        self.client = httpx.AsyncClient(transport=transport, base_url="http://idempay")

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.container.aclose()

    async def post(self, payment: dict[str, Any], *, keyed: bool = True) -> httpx.Response:
        headers = dict(self.auth)
        if keyed:
            headers["Idempotency-Key"] = payment["idempotency_key"]
        body = {k: v for k, v in payment.items() if k != "idempotency_key"}
        body["channel"] = CHANNEL
        return await self.client.post("/v1/payments", json=body, headers=headers)

    async def run_new(self, tag: str, seconds: float) -> tuple[Tally, list[dict[str, Any]]]:
        tally, done = Tally(), []
        calls0, cpu0 = self.channel.calls, time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        i = 0
        while (s := time.perf_counter()) < end:
            payment = _payment(tag, i)
            answer = await self.post(payment)
            tally.latencies.append(time.perf_counter() - s)
            tally.bad += answer.status_code != 201
            done.append(payment)
            i += 1
        tally.seconds = time.perf_counter() - t0
        tally.cpu_s = time.process_time() - cpu0
        tally.channel_calls = self.channel.calls - calls0
        return tally, done

    async def run_repeat(self, done: list[dict[str, Any]], seconds: float) -> Tally:
        tally = Tally()
        calls0, cpu0 = self.channel.calls, time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        i = 0
        while (s := time.perf_counter()) < end:
            answer = await self.post(done[i % len(done)])
            tally.latencies.append(time.perf_counter() - s)
            replayed = answer.headers.get("idempotent-replayed") == "true"
            tally.bad += answer.status_code != 201 or not replayed
            i += 1
        tally.seconds = time.perf_counter() - t0
        tally.cpu_s = time.process_time() - cpu0
        tally.channel_calls = self.channel.calls - calls0
        return tally

    async def _status(self, biz_no: str) -> str:
        answer = await self.client.get(f"/v1/payments/{biz_no}", headers=self.auth)
        return str(answer.json().get("status"))

    async def _resolve(self) -> None:
        """What the worker does: query the channel for the instructions in doubt that are due."""
        assert self.clock is not None
        self.clock.advance(3600)  # past stale_pending_s, the key's in-flight window, any backoff
        resolver = bootstrap.build_worker(self.container, "bench-peer").resolver
        while await resolver.run_once():
            pass

    async def demo(self) -> dict[str, Any]:
        """The same two situations as Powertools.demo (ManualClock: no waiting)."""
        assert self.clock is not None
        out: dict[str, Any] = {}
        ch = self.channel

        payment = _payment("demo-kill", 0)
        ch.after_execute = _kill
        try:
            await self.post(payment)
        except BaseException as e:  # Killed, possibly wrapped in a BaseExceptionGroup
            out["kill_first"] = type(e).__name__
        finally:
            ch.after_execute = None
        out["kill_retry_at_once"] = (await self.post(payment)).status_code
        in_flight = self.container.idempotency.policy.in_flight_s
        self.clock.advance(in_flight + 1)
        again = await self.post(payment)
        out["kill_retry_after_in_flight"] = f"{again.status_code} {again.json().get('status')}"
        no_key = await self.post(payment, keyed=False)
        out["kill_retry_without_key"] = f"{no_key.status_code} {no_key.json().get('status')}"
        await self._resolve()
        out["kill_status_after_query"] = await self._status(payment["biz_no"])
        out["kill_executions"] = len(ch.executions())
        out["kill_channel_calls"] = ch.calls

        payment = _payment("demo-lost", 0)
        ch.plan(Behavior.HALF_OPEN)
        first = await self.post(payment)
        out["lost_first"] = f"{first.status_code} {first.json().get('status')}"
        again = await self.post(payment)
        out["lost_retry"] = f"{again.status_code} {again.json().get('status')}"
        await self._resolve()
        out["lost_status_after_query"] = await self._status(payment["biz_no"])
        lost_id = first.json().get("id")
        out["lost_executions"] = len([e for e in ch.executions() if e.payment_ref == lost_id])
        out["channel_calls"] = ch.calls
        return out


# --- the run -------------------------------------------------------------------------------------


def main(spec: dict[str, Any]) -> dict[str, Any]:
    logs.configure("json", level=logging.CRITICAL)  # the demo's dying requests log errors
    logging.getLogger("aws_lambda_powertools").setLevel(logging.CRITICAL)
    runs, new_s, repeat_s = spec["runs"], spec["new_s"], spec["repeat_s"]
    warm_new, warm_repeat = spec["warmup_s"], min(spec["warmup_s"], repeat_s)
    pt = Powertools(spec["redis_host"], spec["redis_port"], spec["prefix"])
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def keep(case: str, kind: str, tally: Tally) -> None:
        results.setdefault(case, {}).setdefault(kind, []).append(tally.result())

    with asyncio.Runner() as runner:
        sides = {kind: Idempay(url) for kind, url in spec["databases"].items()}
        for side in sides.values():
            runner.run(side.start())
        t0 = time.perf_counter()
        try:
            for r in range(runs + 1):  # round 0 is the warm-up, not reported
                a, b = (warm_new, warm_repeat) if r == 0 else (new_s, repeat_s)
                new, done = pt.run_new(f"r{r}", a)
                repeat = pt.run_repeat(done, b)
                if r:
                    keep("powertools", "new", new)
                    keep("powertools", "repeat", repeat)
                for kind, side in sides.items():
                    inew, idone = runner.run(side.run_new(f"{kind}-r{r}", a))
                    irepeat = runner.run(side.run_repeat(idone, b))
                    if r:
                        keep(kind, "new", inew)
                        keep(kind, "repeat", irepeat)
            measured_s = time.perf_counter() - t0
            demo_db = spec["databases"].get("postgresql") or next(iter(spec["databases"].values()))
            demo_side = Idempay(demo_db, ManualClock(datetime.now(UTC)))
            runner.run(demo_side.start())
            try:
                idempay_demo = runner.run(demo_side.demo())
            finally:
                runner.run(demo_side.aclose())
            pt_demo = pt.demo()
            redis_facts = pt.redis_facts()
        finally:
            for side in sides.values():
                runner.run(side.aclose())
            removed = pt.cleanup()
    return {
        "results": results,
        "measured_s": measured_s,
        "powertools_demo": pt_demo,
        "idempay_demo": idempay_demo,
        "redis": redis_facts,
        "redis_keys_removed": removed,
    }


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    Path(spec["out"]).write_text(json.dumps(main(spec)))
