"""A small HTTP receiver for callbacks in tests: records every delivery (when, headers, body) and
answers 500 to the first `fail_first` of them, 200 {"code": "SUCCESS"} afterwards."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from idempay.simbank.http import HttpServer, Request, Response, serve


@dataclass(frozen=True)
class Delivery:
    at: float  # time.monotonic() on arrival
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data


class Receiver:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.fail_first = 0
        self._arrived = asyncio.Condition()
        self._server: HttpServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}/notify"

    async def start(self) -> Receiver:
        self._server = await serve(self._handle, "127.0.0.1", 0)
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            await self._server.aclose()

    async def _handle(self, request: Request) -> Response:
        async with self._arrived:
            self.deliveries.append(Delivery(time.monotonic(), request.headers, request.body))
            self._arrived.notify_all()
            if len(self.deliveries) <= self.fail_first:
                return Response(500, {"code": "TRY_AGAIN"})
        return Response(200, {"code": "SUCCESS"})

    async def wait_for(self, count: int, timeout_s: float = 5.0) -> list[Delivery]:
        """The first `count` deliveries, waiting for them (TimeoutError if they do not come)."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.deliveries) >= count)
        return self.deliveries[:count]
