"""The simbank adapter's mapping of what can go wrong: NotSent only when the request provably
never left; OutcomeUnknown for anything after that; 4xx rejections are Declined; and its wire
format and configuration."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from idempay.channels.errors import ChannelRejected
from idempay.channels.simbank import LANES, SimbankChannel
from idempay.config import ConfigError, Settings
from idempay.domain.errors import Declined, NotSent, OutcomeUnknown
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelOp, ChannelStatus
from tests.channels.harness import new_op
from tests.simbank_proc import free_port

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
async def mocked() -> AsyncIterator[Callable[[Handler], SimbankChannel]]:
    made: list[SimbankChannel] = []

    def make(handler: Handler) -> SimbankChannel:
        made.append(
            SimbankChannel("simbank", "http://bank.test", transport=httpx.MockTransport(handler))
        )
        return made[-1]

    yield make
    for channel in made:
        await channel.aclose()


def raising(error: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    return handler


def answering(status: int, body: Any, *, raw: bytes | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=raw if raw is not None else json.dumps(body).encode())

    return handler


async def test_connection_refused_is_not_sent() -> None:
    channel = SimbankChannel("simbank", f"http://127.0.0.1:{free_port()}", timeout_s=2)
    try:
        with pytest.raises(NotSent):
            await channel.execute(new_op())
    finally:
        await channel.aclose()


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), httpx.PoolTimeout("full")],
)
async def test_a_request_that_never_left_is_not_sent(mocked: Any, error: Exception) -> None:
    with pytest.raises(NotSent):
        await mocked(raising(error)).execute(new_op())


@pytest.mark.parametrize(
    "error",
    [
        httpx.ReadTimeout("slow answer"),
        httpx.WriteTimeout("slow send"),
        httpx.ReadError("reset by peer"),
        httpx.WriteError("broken pipe"),
        httpx.RemoteProtocolError("server disconnected without sending a response"),
    ],
)
async def test_a_request_that_may_have_left_is_outcome_unknown(
    mocked: Any, error: Exception
) -> None:
    with pytest.raises(OutcomeUnknown):
        await mocked(raising(error)).execute(new_op())


@pytest.mark.parametrize(
    "handler",
    [
        answering(500, {"code": "INTERNAL"}),
        answering(502, None, raw=b"<html>bad gateway</html>"),
        answering(503, {"code": "SERVICE_UNAVAILABLE"}),
        answering(200, None, raw=b"not json"),
        answering(200, None, raw=b'{"request_id": "req_'),
        answering(200, [1, 2]),
        answering(200, {"request_id": "req_someone_else", "status": "SUCCESS"}),
        answering(200, {"status": "SUCCESS"}),
    ],
    ids=["500", "502-html", "503", "not-json", "truncated-json", "array", "other-id", "no-id"],
)
async def test_an_answer_that_cannot_be_trusted_is_outcome_unknown(
    mocked: Any, handler: Handler
) -> None:
    with pytest.raises(OutcomeUnknown):
        await mocked(handler).execute(new_op())


async def test_an_unknown_status_in_an_answer_is_outcome_unknown(mocked: Any) -> None:
    op = new_op()
    with pytest.raises(OutcomeUnknown):
        await mocked(answering(200, {"request_id": op.request_id, "status": "MAYBE"})).execute(op)


async def test_a_4xx_rejection_is_declined_and_a_409_is_outcome_unknown(mocked: Any) -> None:
    with pytest.raises(ChannelRejected) as caught:
        await mocked(answering(400, {"code": "INVALID_REQUEST", "message": "no"})).execute(new_op())
    assert isinstance(caught.value, Declined)
    assert (caught.value.status_code, caught.value.channel_code) == (400, "INVALID_REQUEST")
    with pytest.raises(OutcomeUnknown):
        await mocked(answering(409, {"code": "REQUEST_ID_REUSED"})).execute(new_op())


async def test_query_maps_not_found_only_from_the_simulators_not_found(mocked: Any) -> None:
    found = await mocked(answering(404, {"code": "NOT_FOUND"})).query(OpKind.PAY, "req_1")
    assert found.status is ChannelStatus.NOT_FOUND
    for handler in (answering(404, {"code": "NO_SUCH_ENDPOINT"}), answering(503, {})):
        with pytest.raises(OutcomeUnknown):
            await mocked(handler).query(OpKind.PAY, "req_1")


async def test_a_truncated_body_on_the_wire_is_outcome_unknown() -> None:
    async def truncate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"request_id": ')
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(truncate, "127.0.0.1", 0)
    channel = SimbankChannel("simbank", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        with pytest.raises(OutcomeUnknown):
            await channel.execute(new_op())
    finally:
        await channel.aclose()
        server.close()


async def test_concurrent_requests_are_spread_over_the_channels_small_clients() -> None:
    """httpcore's pool costs CPU per request in proportion to the requests on its client: 48 at
    once go 3 to each of the 16 lanes (and each still gets its own answer)."""
    n, arrived, release = 3 * LANES, asyncio.Event(), asyncio.Event()
    held: list[str] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_id = head.split(b" ")[1].rsplit(b"/", 1)[1].decode()  # GET /bank/pay/{id}
        held.append(request_id)
        if len(held) == n:
            arrived.set()
        await release.wait()
        body = json.dumps({"request_id": request_id, "status": "SUCCESS"}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    channel = SimbankChannel("simbank", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        queries = [asyncio.create_task(channel.query(OpKind.PAY, f"req_{i}")) for i in range(n)]
        await asyncio.wait_for(arrived.wait(), 10)
        assert channel._busy == [3] * LANES
        release.set()
        answers = await asyncio.gather(*queries)
        assert [a.request_id for a in answers] == [f"req_{i}" for i in range(n)]
        assert {a.status for a in answers} == {ChannelStatus.SUCCESS}
        assert channel._busy == [0] * LANES
    finally:
        await channel.aclose()
        server.close()


async def test_execute_sends_the_documented_wire_body(mocked: Any) -> None:
    seen: list[httpx.Request] = []
    op = ChannelOp("req_1", OpKind.SPLIT, "pay_1", 3000, "CNY", "http://me/notify", "distributor-7")

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "request_id": "req_1",
                "status": "SUCCESS",
                "amount": 3000,
                "currency": "CNY",
                "channel_txn_id": "sbt_1",
            },
        )

    answer = await mocked(handler).execute(op)
    assert (seen[0].method, seen[0].url.path) == ("POST", "/bank/split")
    assert json.loads(seen[0].content) == {
        "request_id": "req_1",
        "payment_ref": "pay_1",
        "amount": 3000,
        "currency": "CNY",
        "notify_url": "http://me/notify",
        "receiver_id": "distributor-7",
    }
    assert (answer.status, answer.amount, answer.channel_txn_id) == (
        ChannelStatus.SUCCESS,
        3000,
        "sbt_1",
    )


async def test_from_settings_reads_base_url_secret_and_timeout() -> None:
    settings = Settings(channel_timeout_s=7.0)
    conf = {
        "kind": "simbank",
        "base_url": "http://127.0.0.1:8765/",
        "secret": "abc",
        "timeout_ms": 1500,
    }
    channel = SimbankChannel.from_settings("bank", conf, settings)
    default = SimbankChannel.from_settings("bank", {"base_url": "http://x"}, settings)
    try:
        assert (channel.name, channel.base_url) == ("bank", "http://127.0.0.1:8765")
        assert channel._lanes[0].timeout.read == 1.5
        assert default._lanes[0].timeout.read == 7.0
    finally:
        await channel.aclose()
        await default.aclose()


@pytest.mark.parametrize(
    "conf", [{}, {"base_url": "127.0.0.1:8765"}, {"base_url": "http://x", "timeout_ms": "fast"}]
)
def test_from_settings_refuses_an_unusable_configuration(conf: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SimbankChannel.from_settings("bank", conf, Settings())
