"""The simulator's HTTP surface: channel endpoints under /bank (what the adapter calls), control
endpoints under /_sim (faults, ledger, reset), and the faults that shape when and whether an
answer is sent (latency, 5xx, dropped connection, held answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from idempay.simbank.bank import Bank, RequestIdReused
from idempay.simbank.faults import Faults
from idempay.simbank.http import Drop, HttpError, Request, Response
from idempay.simbank.wire import KINDS, bad, identifier, json_body, parse_day, parse_op


class Routes:
    def __init__(self, bank: Bank) -> None:
        self.bank = bank

    async def __call__(self, req: Request) -> Response:
        parts = [p for p in req.path.split("/") if p]
        match req.method, parts:
            case "GET", ["_sim", "faults"]:
                return Response(200, self.bank.faults.as_dict())
            case "PUT", ["_sim", "faults"]:
                return self._put_faults(req)
            case "GET", ["_sim", "ledger"]:
                ledger = self.bank.ledger.executions(req.query.get("payment_ref"))
                return Response(200, [e.public() for e in ledger])
            case "POST", ["_sim", "reset"]:
                await self.bank.reset()
                return Response(200, {"ledger": [], "faults": self.bank.faults.as_dict()})
            case "GET", ["_sim", "health"]:
                return Response(200, {"status": "ok"})
            case "GET", ["bank", "statement"]:
                return await self._statement(req)
            case "POST", ["bank", kind] if kind in KINDS:
                return await self._execute(KINDS[kind], req)
            case "GET", ["bank", kind, request_id] if kind in KINDS:
                return await self._query(KINDS[kind], request_id)
            case "POST", ["bank", kind, request_id, "close"] if kind in KINDS:
                return await self._close(KINDS[kind], request_id)
        raise HttpError(404, "NO_SUCH_ENDPOINT", f"no endpoint {req.method} {req.path}")

    def _put_faults(self, req: Request) -> Response:
        try:
            faults = Faults.parse(json_body(req.body))
        except ValueError as e:
            raise bad(str(e)) from None
        self.bank.set_faults(faults)
        return Response(200, faults.as_dict())

    async def _execute(self, kind: str, req: Request) -> Response:
        op = parse_op(kind, req.body)
        decision = (
            self.bank.roll()
        )  # drawn on arrival, so the order of draws is the order of requests
        await self._latency()
        if decision.error:
            raise HttpError(503, "SERVICE_UNAVAILABLE", "simulated error: nothing was executed")
        answer = self._guarded(lambda: self.bank.execute(op, decision))
        if decision.drop:
            raise Drop
        if decision.timeout:
            await asyncio.sleep(self.bank.faults.timeout_hold_ms / 1000)
        return Response(200, answer)

    async def _query(self, kind: str, request_id: str) -> Response:
        identifier(request_id, "request_id")
        await self._latency()
        answer = self.bank.query(kind, request_id)
        if answer is None:
            raise HttpError(
                404, "NOT_FOUND", f"no {kind} with request_id {request_id} was received"
            )
        return Response(200, answer)

    async def _close(self, kind: str, request_id: str) -> Response:
        identifier(request_id, "request_id")
        await self._latency()
        return Response(200, self._guarded(lambda: self.bank.close(kind, request_id)))

    async def _statement(self, req: Request) -> Response:
        day = parse_day(req.query.get("date"))
        await self._latency()
        return Response(200, {"date": day.isoformat(), "items": self.bank.statement(day)})

    async def _latency(self) -> None:
        if self.bank.faults.latency_ms:
            await asyncio.sleep(self.bank.faults.latency_ms / 1000)

    @staticmethod
    def _guarded(action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return action()
        except RequestIdReused as e:
            raise HttpError(409, "REQUEST_ID_REUSED", str(e)) from None
