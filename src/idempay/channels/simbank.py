"""The adapter for the channel simulator (`idempay simbank`): wire format, status mapping and
callback verification. Its endpoints (docs/simbank.md has the full wire format):

  POST /bank/{pay|refund|split}                  execute {request_id, payment_ref, amount,
                                                 currency, notify_url?, receiver_id (split)}
  GET  /bank/{pay|refund|split}/{request_id}     query; 404 {"code": "NOT_FOUND"} if never received
  POST /bank/{pay|refund|split}/{request_id}/close   close; an executed one answers its status
  GET  /bank/statement?date=YYYY-MM-DD           every execution of that UTC day

Callbacks: POST notify_url, X-Simbank-Timestamp + X-Simbank-Signature (hex HMAC-SHA256 of
f"{timestamp}.{body}"); acknowledged with 200 {"code": "SUCCESS"}.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any
from urllib.parse import quote

import httpx

from idempay.channels.errors import ChannelRejected, map_exceptions
from idempay.config import ConfigError, Settings
from idempay.domain.errors import InvalidRequest, OutcomeUnknown
from idempay.domain.model import OpKind
from idempay.domain.ports import (
    ChannelAnswer,
    ChannelNotification,
    ChannelOp,
    ChannelStatus,
    StatementLine,
)
from idempay.simbank import signing

SEGMENT = {OpKind.PAY: "pay", OpKind.REFUND: "refund", OpKind.SPLIT: "split"}
DEFAULT_SECRET = "simbank-dev-secret"
CONNECT_TIMEOUT_S = 3.0
# httpcore's pool looks at every connection of its client twice per request (and polls each idle
# socket): with 50 requests in flight on one client that is ~6 ms of CPU per request, with a few
# ~1 ms. So a channel spreads its requests over LANES small clients, each on the least busy one.
LANES = 16
_EXECUTE_STATUSES = {ChannelStatus.SUCCESS, ChannelStatus.FAILED, ChannelStatus.PROCESSING}
_FINAL_STATUSES = {ChannelStatus.SUCCESS, ChannelStatus.FAILED}


class SimbankChannel:
    """LANES httpx.AsyncClients per channel object (one with a given transport); `aclose()`
    closes them. `max_connections` is the channel's total, spread over the lanes."""

    def __init__(
        self,
        name: str,
        base_url: str,
        secret: str = DEFAULT_SECRET,
        *,
        timeout_s: float = 10.0,
        max_connections: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._secret = secret
        lanes = 1 if transport is not None else min(LANES, max_connections)
        limits = httpx.Limits(
            max_connections=max_connections // lanes,
            max_keepalive_connections=max(1, 64 // lanes),
        )
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
        tls = httpx.create_ssl_context()  # one for all lanes: each costs milliseconds to load
        self._lanes = [
            httpx.AsyncClient(
                base_url=self.base_url,
                timeout=timeout,
                limits=limits,
                verify=tls,
                transport=transport,
            )
            for _ in range(lanes)
        ]
        self._busy = [0] * lanes  # requests in flight per lane

    @contextmanager
    def _client(self) -> Iterator[httpx.AsyncClient]:
        """The least busy lane, for one request."""
        i = min(range(len(self._busy)), key=self._busy.__getitem__)
        self._busy[i] += 1
        try:
            yield self._lanes[i]
        finally:
            self._busy[i] -= 1

    @classmethod
    def from_settings(
        cls, name: str, conf: Mapping[str, Any], settings: Settings
    ) -> SimbankChannel:
        """conf: {"base_url": required, "secret": default simbank-dev-secret, "timeout_ms":
        default IDEMPAY_CHANNEL_TIMEOUT_MS}."""
        base_url, secret = conf.get("base_url"), conf.get("secret", DEFAULT_SECRET)
        timeout_ms = conf.get("timeout_ms")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r} needs an http(s) base_url")
        if not isinstance(secret, str) or not secret:
            raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r}: secret must be a string")
        if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms < 1):
            raise ConfigError(f"IDEMPAY_CHANNELS: channel {name!r}: timeout_ms must be an integer")
        timeout_s = settings.channel_timeout_s if timeout_ms is None else timeout_ms / 1000
        return cls(name, base_url, secret, timeout_s=timeout_s)

    async def aclose(self) -> None:
        for lane in self._lanes:
            await lane.aclose()

    # --- the Channel port ------------------------------------------------------------------

    async def execute(self, op: ChannelOp) -> ChannelAnswer:
        body: dict[str, Any] = {
            "request_id": op.request_id,
            "payment_ref": op.payment_ref,
            "amount": op.amount,
            "currency": op.currency,
        }
        if op.notify_url:
            body["notify_url"] = op.notify_url
        if op.kind is OpKind.SPLIT:
            body["receiver_id"] = op.receiver_id
        with map_exceptions(), self._client() as client:
            response = await client.post(f"/bank/{SEGMENT[op.kind]}", json=body)
            data = _json(response)
            if response.status_code == 200:
                return _answer(data, op.request_id, _EXECUTE_STATUSES)
        if response.status_code == 409:  # request_id known with other parameters: may have run
            raise OutcomeUnknown(f"409 {data.get('code')}: {data.get('message')}")
        raise ChannelRejected(
            f"{response.status_code} {data.get('code')}: {data.get('message')}",
            status_code=response.status_code,
            channel_code=_str(data.get("code")),
        )

    async def query(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        with map_exceptions(), self._client() as client:
            response = await client.get(f"/bank/{SEGMENT[kind]}/{quote(request_id, safe='')}")
            data = _json(response)
            if response.status_code == 200:
                return _answer(data, request_id, _EXECUTE_STATUSES)
        if response.status_code == 404 and data.get("code") == "NOT_FOUND":
            return ChannelAnswer(request_id, ChannelStatus.NOT_FOUND)
        raise OutcomeUnknown(f"query answered {response.status_code} {data.get('code')}")

    async def close(self, kind: OpKind, request_id: str) -> ChannelAnswer:
        with map_exceptions(), self._client() as client:
            path = f"/bank/{SEGMENT[kind]}/{quote(request_id, safe='')}/close"
            response = await client.post(path)
            data = _json(response)
            if response.status_code == 200:
                return _answer(data, request_id, {*_EXECUTE_STATUSES, ChannelStatus.CLOSED})
        raise OutcomeUnknown(f"close answered {response.status_code} {data.get('code')}")

    async def statement(self, day: date) -> list[StatementLine]:
        with map_exceptions(), self._client() as client:
            response = await client.get("/bank/statement", params={"date": day.isoformat()})
            data = _json(response)
            if response.status_code != 200:
                raise OutcomeUnknown(
                    f"statement answered {response.status_code} {data.get('code')}"
                )
            return [_line(item) for item in data["items"]]

    def verify_callback(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> ChannelNotification:
        """The notification in a callback, after its signature and timestamp are checked on the
        raw bytes (InvalidSignature otherwise); a signed but malformed body is InvalidRequest."""
        return parse_callback(self._secret, headers, body, now)

    def callback_ack(self) -> tuple[int, dict[str, Any]]:
        """What simbank expects back for a callback it should stop redelivering."""
        return 200, {"code": "SUCCESS"}


# --- wire format -> domain -------------------------------------------------------------------


def parse_callback(
    secret: str, headers: Mapping[str, str], body: bytes, now: datetime
) -> ChannelNotification:
    """Verify a simbank callback (signature, timestamp: on the raw bytes), only then read it."""
    signing.verify(secret, headers, body, now)
    try:
        data = json.loads(body)
        status = ChannelStatus(data["status"])
        if status not in _FINAL_STATUSES:
            raise ValueError(f"a callback is final, not {status}")
        return ChannelNotification(
            notify_id=_text(data["notify_id"]),
            request_id=_text(data["request_id"]),
            kind=OpKind(data["kind"]),
            status=status,
            amount=_int(data["amount"]),
            currency=_text(data["currency"]),
            payment_ref=_str(data.get("payment_ref")),
            channel_txn_id=_str(data.get("channel_txn_id")),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidRequest(f"malformed simbank callback: {e}") from e


def _json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of an answer; a 5xx raises (mapped to OutcomeUnknown by the caller)."""
    if response.status_code >= 500:
        response.raise_for_status()
    data = response.json()
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    return data


def _answer(data: dict[str, Any], request_id: str, allowed: set[ChannelStatus]) -> ChannelAnswer:
    if data["request_id"] != request_id:
        raise ValueError(f"an answer for request_id {data['request_id']!r}, not {request_id!r}")
    status = ChannelStatus(data["status"])
    if status not in allowed:
        raise ValueError(f"unexpected status {status}")
    amount = data.get("amount")
    return ChannelAnswer(
        request_id=request_id,
        status=status,
        amount=None if amount is None else _int(amount),
        currency=_str(data.get("currency")),
        channel_txn_id=_str(data.get("channel_txn_id")),
        reason=_str(data.get("reason")),
    )


def _line(item: dict[str, Any]) -> StatementLine:
    return StatementLine(
        request_id=_text(item["request_id"]),
        kind=OpKind(item["kind"]),
        payment_ref=_text(item["payment_ref"]),
        amount=_int(item["amount"]),
        currency=_text(item["currency"]),
        status=ChannelStatus(item["status"]),
        channel_txn_id=_str(item.get("channel_txn_id")),
        executed_at=datetime.fromisoformat(item["executed_at"]),
        receiver_id=_str(item.get("receiver_id")),
    )


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer amount, got {value!r}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _str(value: object) -> str | None:
    return None if value is None else _text(value)
