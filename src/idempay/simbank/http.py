"""A small HTTP/1.1 server on asyncio and h11, JSON in and out. It exists for the one thing an
ASGI server cannot do: close a connection without answering (`Drop`), the half-open fault."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import h11
import structlog

log = structlog.get_logger("idempay.simbank.http")

MAX_BODY_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: Any  # anything json.dumps takes
    headers: dict[str, str] = field(default_factory=dict)


class HttpError(Exception):
    """Answer `status` with {"code", "message"} (and "field" when one field is to blame)."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> Response:
        body = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return Response(self.status, body)


class Drop(Exception):
    """Raised by a handler: close the connection at once, without sending any answer."""


Handler = Callable[[Request], Awaitable[Response]]


class HttpServer:
    """A listening server; `aclose()` stops listening and cuts every open connection."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> HttpServer:
        self._server = await asyncio.start_server(self._accept, host, port, backlog=1024)
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await _connection(self._handler, reader, writer)
        finally:
            self._connections.discard(task)


async def serve(handler: Handler, host: str, port: int) -> HttpServer:
    """Listen on host:port (port 0: any free port) and answer every request with `handler`."""
    return await HttpServer(handler).start(host, port)


async def _connection(
    handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            try:
                request = await _read_request(conn, reader)
            except HttpError as e:
                await _send(conn, writer, e.response())
                return
            if request is None:
                return
            try:
                response = await handler(request)
            except Drop:
                writer.transport.abort()
                return
            except HttpError as e:
                response = e.response()
            except Exception:
                log.exception("simbank.handler_failed", method=request.method, path=request.path)
                response = Response(500, {"code": "INTERNAL", "message": "simulator defect"})
            await _send(conn, writer, response)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as e:  # not HTTP/1.1 as h11 knows it
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            with contextlib.suppress(OSError, h11.LocalProtocolError):
                bad = HttpError(e.error_status_hint, "BAD_HTTP", str(e))
                await _send(conn, writer, bad.response())
    except (OSError, h11.LocalProtocolError):
        pass  # the client went away mid-answer
    finally:
        writer.close()


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(READ_CHUNK))


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
    head = await _next_event(conn, reader)
    if not isinstance(head, h11.Request):
        return None  # ConnectionClosed: nothing more on this connection
    chunks: list[bytes] = []
    size = 0
    while not isinstance(event := await _next_event(conn, reader), h11.EndOfMessage):
        if isinstance(event, h11.ConnectionClosed):
            return None
        size += len(event.data)
        if size > MAX_BODY_BYTES:
            raise HttpError(413, "PAYLOAD_TOO_LARGE", f"body over {MAX_BODY_BYTES} bytes")
        chunks.append(bytes(event.data))
    target = urlsplit(head.target.decode("ascii", "replace"))
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
    return Request(
        method=head.method.decode("ascii", "replace"),
        path=unquote(target.path),
        query=dict(parse_qsl(target.query)),
        headers=headers,
        body=b"".join(chunks),
    )


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, response: Response) -> None:
    data = json.dumps(response.body).encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(data))),
        *response.headers.items(),
    ]
    writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
    writer.write(conn.send(h11.Data(data=data)))
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()
