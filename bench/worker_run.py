"""The worker scenario's direct calls to the simulator, in their own process
(`python -m bench.worker_run '<json>'`), `concurrency` calls always in flight:

- `execute`: POST /bank/pay of every row the simulator should know (setup: what the lost answers
  were answers to);
- `query`: GET /bank/pay/{request_id} of every row once: the simulator's raw query rate, the
  scenario's baseline;
- `adapter`: the same queries (the first `limit` rows) through idempay's own `SimbankChannel`,
  the adapter the worker queries with: what its httpx client costs at the worker's concurrency.

`execute` and `query` use a lean client (one keep-alive HTTP/1.1 connection per lane, asyncio
streams): at 50 in flight httpx's pool bookkeeping costs milliseconds of CPU per request, and the
baseline would measure the client instead of the simulator. Prints seconds, answers by status
and this process's CPU seconds."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import unknowns
from bench.procs import SIMBANK_SECRET
from idempay.channels.simbank import SimbankChannel
from idempay.domain.model import OpKind

Call = Callable[[unknowns.Unknown], Awaitable[str]]


class Lane:
    """One keep-alive connection to the simulator, one request at a time."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> str:
        """The answer's `status` field (SUCCESS, ...), or the HTTP status when it has none."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        writer.write(head.encode() + b"\r\n" + data)
        header = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        answer = json.loads(await reader.readexactly(length))
        return str(answer.get("status") or f"HTTP {header[9:12].decode()}")

    def caller(self, op: str) -> Call:
        """`execute` (POST /bank/pay) or `query` (GET /bank/pay/{request_id}) on this lane."""

        async def execute(u: unknowns.Unknown) -> str:
            body = {"request_id": u.request_id, "payment_ref": u.payment_id, "amount": u.amount}
            return await self.call("POST", "/bank/pay", {**body, "currency": "CNY"})

        async def query(u: unknowns.Unknown) -> str:
            return await self.call("GET", f"/bank/pay/{u.request_id}")

        return execute if op == "execute" else query

    async def aclose(self) -> None:
        if self.streams is not None:
            self.streams[1].close()


async def _each(rows: list[unknowns.Unknown], lanes: list[Call]) -> tuple[float, Counter[str]]:
    """One task per lane, all pulling from one queue of rows: len(lanes) calls in flight."""
    todo = iter(rows)
    statuses: Counter[str] = Counter()

    async def lane(call: Call) -> None:
        for row in todo:
            try:
                statuses[await call(row)] += 1
            except Exception as e:  # counted, never fatal: the scenario checks the counts
                statuses[f"error {type(e).__name__}"] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(lane(call) for call in lanes))
    return time.perf_counter() - t0, statuses


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    rows = [u for u in unknowns.load(Path(spec["rows"])) if u.executed][: spec.get("limit")]
    lanes: list[Call]
    closers: list[Callable[[], Awaitable[None]]]
    if spec["op"] == "adapter":
        channel = SimbankChannel(unknowns.CHANNEL, spec["sim_url"], SIMBANK_SECRET)

        async def query(u: unknowns.Unknown) -> str:
            return str((await channel.query(OpKind.PAY, u.request_id)).status)

        lanes, closers = [query] * spec["concurrency"], [channel.aclose]
    else:
        conns = [Lane(spec["sim_url"]) for _ in range(spec["concurrency"])]
        lanes, closers = [c.caller(spec["op"]) for c in conns], [c.aclose for c in conns]
    try:
        cpu0 = time.process_time()
        seconds, statuses = await _each(rows, lanes)
        cpu = time.process_time() - cpu0
    finally:
        for close in closers:
            await close()
    return {"seconds": seconds, "statuses": dict(statuses), "cpu_s": cpu, "calls": len(rows)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
