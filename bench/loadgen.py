"""The HTTP load generator: one process, N concurrent asyncio clients on httpx, started at an
agreed wall-clock time so several generator processes load the server together.

`python -m bench.loadgen '<json spec>'` prints one JSON result on stdout (without an argument it
serves one spec per stdin line). Modes: `first` (a new
biz_no per request; the requests are written to `record` for replays), `replay` (the recorded
requests again, with or without their Idempotency-Key), `storm` (`fanout` clients send the same
biz_no at once, for `keys` biz_nos), `direct` (POST /bank/pay on the simulator).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

AMOUNT = 19900


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    dup_latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    requests: int = 0
    errors: int = 0
    replayed: int = 0
    first_error: str = ""
    last_done: float = 0.0
    keys: int = 0

    def record(self, t0: float, response: httpx.Response | None, error: str = "") -> None:
        now = time.perf_counter()
        self.last_done = now
        self.requests += 1
        ms = (now - t0) * 1000
        if response is None:
            self.errors += 1
            self.first_error = self.first_error or error
            return
        self.statuses[response.status_code] += 1
        if response.status_code >= 300:  # an error is counted, never timed with the answers
            self.errors += 1
            self.first_error = self.first_error or f"{response.status_code} {response.text[:300]}"
            return
        self.latencies_ms.append(ms)
        if response.headers.get("idempotent-replayed") == "true":
            self.replayed += 1
            self.dup_latencies_ms.append(ms)


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


def _read_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def _body(biz_no: str) -> dict[str, Any]:
    return {
        "biz_no": biz_no,
        "order_no": "ORD" + biz_no[-20:],
        "amount": AMOUNT,
        "currency": "CNY",
        "channel": "simbank",
    }


async def _send(
    client: httpx.AsyncClient, tally: Tally, path: str, body: dict[str, Any], headers: Any
) -> None:
    t0 = time.perf_counter()
    try:
        response = await client.post(path, json=body, headers=headers)
    except httpx.HTTPError as e:
        tally.record(t0, None, f"{type(e).__name__}: {e}")
        return
    tally.record(t0, response)


async def _first(spec: dict[str, Any], client: httpx.AsyncClient, tally: Tally, end: float) -> None:
    auth = {"Authorization": f"Bearer {spec['api_key']}"}
    records: list[dict[str, Any]] = []

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < end:
            biz_no = f"{spec['tag']}-{w}-{i}"
            i += 1
            key = f"K{biz_no}" if spec.get("keyed", True) else None
            headers = {**auth, "Idempotency-Key": key} if key else auth
            body = _body(biz_no)
            await _send(client, tally, "/v1/payments", body, headers)
            records.append({"body": body, "key": key})

    await asyncio.gather(*(worker(w) for w in range(spec["concurrency"])))
    if spec.get("record"):
        _write_lines(Path(spec["record"]), [json.dumps(r) for r in records])


async def _replay(
    spec: dict[str, Any], client: httpx.AsyncClient, tally: Tally, end: float
) -> None:
    auth = {"Authorization": f"Bearer {spec['api_key']}"}
    records = [json.loads(line) for line in _read_lines(Path(spec["records"]))]
    with_key = spec.get("with_key", False)
    c = spec["concurrency"]

    async def worker(w: int) -> None:
        mine = records[w::c] or records
        i = 0
        while time.perf_counter() < end:
            r = mine[i % len(mine)]
            i += 1
            headers = {**auth, "Idempotency-Key": r["key"]} if with_key and r["key"] else auth
            await _send(client, tally, "/v1/payments", r["body"], headers)

    await asyncio.gather(*(worker(w) for w in range(c)))


async def _storm(spec: dict[str, Any], client: httpx.AsyncClient, tally: Tally, end: float) -> None:
    """`fanout` clients per biz_no, released together by a barrier; a new biz_no only after the
    last answer for the previous one, until `keys` biz_nos or the deadline."""
    auth = {"Authorization": f"Bearer {spec['api_key']}"}
    fanout, keys = spec["fanout"], spec["keys"]
    barrier = asyncio.Barrier(fanout)
    state = {"stop": False, "keys": 0}

    async def worker(first: bool) -> None:
        for k in range(keys):
            await barrier.wait()  # every worker decided `stop` before arriving here
            if state["stop"]:
                return
            if first:
                state["keys"] += 1
            await _send(client, tally, "/v1/payments", _body(f"{spec['tag']}-{k}"), auth)
            if time.perf_counter() >= end:
                state["stop"] = True

    await asyncio.gather(*(worker(i == 0) for i in range(fanout)))
    tally.keys = state["keys"]


async def _direct(
    spec: dict[str, Any], client: httpx.AsyncClient, tally: Tally, end: float
) -> None:
    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < end:
            rid = f"{spec['tag']}-{w}-{i}"
            i += 1
            body = {
                "request_id": rid,
                "payment_ref": f"pay-{rid}",
                "amount": AMOUNT,
                "currency": "CNY",
            }
            await _send(client, tally, "/bank/pay", body, None)

    await asyncio.gather(*(worker(w) for w in range(spec["concurrency"])))


MODES = {"first": _first, "replay": _replay, "storm": _storm, "direct": _direct}


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    connections = max(spec.get("concurrency", 1), spec.get("fanout", 1))
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=spec["url"], limits=limits, timeout=60.0) as client:
        delay = spec.get("start_at", 0) - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tally = Tally()
        cpu0, t0 = time.process_time(), time.perf_counter()
        end = t0 + spec.get("duration_s", 1e9)
        await MODES[spec["mode"]](spec, client, tally, end)
        cpu = time.process_time() - cpu0
    elapsed = (tally.last_done or time.perf_counter()) - t0
    return {
        "count": tally.requests,
        "ok": sum(n for s, n in tally.statuses.items() if s < 300),
        "errors": tally.errors,
        "first_error": tally.first_error,
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "replayed": tally.replayed,
        "keys": tally.keys,
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "latencies_ms": [round(x, 3) for x in tally.latencies_ms],
        "dup_latencies_ms": [round(x, 3) for x in tally.dup_latencies_ms],
    }


def main() -> None:
    """With a spec argument: run it once. Without: a worker that runs one spec per stdin line and
    answers one JSON line each, so a benchmark pays for starting Python and httpx only once."""
    if len(sys.argv) > 1:
        print(json.dumps(asyncio.run(run(json.loads(sys.argv[1])))))
        return
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(asyncio.run(run(json.loads(line)))), flush=True)


if __name__ == "__main__":
    main()
