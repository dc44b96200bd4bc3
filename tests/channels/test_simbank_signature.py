"""Callback verification by the simbank adapter: HMAC-SHA256 over f"{timestamp}.{body}" with the
shared secret, a 5-minute window in both directions, checked on the raw bytes before parsing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from idempay.channels.errors import InvalidSignature
from idempay.channels.simbank import SimbankChannel
from idempay.domain.errors import IdempayError, InvalidRequest
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelStatus
from idempay.simbank.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, signed_headers

SECRET = "s3cret"
NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
BODY = json.dumps(
    {
        "notify_id": "ntf_1",
        "request_id": "req_1",
        "kind": "PAY",
        "payment_ref": "pay_1",
        "receiver_id": None,
        "status": "SUCCESS",
        "reason": None,
        "amount": 19900,
        "currency": "CNY",
        "channel_txn_id": "sbt_1",
        "executed_at": "2026-11-30T05:59:59.000000Z",
        "timestamp": int(NOW.timestamp()),
    }
).encode()


@pytest.fixture
async def channel() -> AsyncIterator[SimbankChannel]:
    c = SimbankChannel("simbank", "http://127.0.0.1:9", SECRET)
    yield c
    await c.aclose()


def headers_at(moment: datetime, secret: str = SECRET, body: bytes = BODY) -> dict[str, str]:
    return signed_headers(secret, body, int(moment.timestamp()))


def test_a_valid_callback_is_accepted_and_read(channel: SimbankChannel) -> None:
    note = channel.verify_callback(headers_at(NOW), BODY, NOW)
    assert (note.notify_id, note.request_id, note.kind, note.status) == (
        "ntf_1",
        "req_1",
        OpKind.PAY,
        ChannelStatus.SUCCESS,
    )
    assert (note.amount, note.currency, note.payment_ref, note.channel_txn_id) == (
        19900,
        "CNY",
        "pay_1",
        "sbt_1",
    )


def test_header_names_are_case_insensitive(channel: SimbankChannel) -> None:
    lower = {k.lower(): v for k, v in headers_at(NOW).items()}
    assert channel.verify_callback(lower, BODY, NOW).request_id == "req_1"


def test_a_timestamp_four_minutes_off_is_still_accepted(channel: SimbankChannel) -> None:
    channel.verify_callback(headers_at(NOW - timedelta(minutes=4)), BODY, NOW)
    channel.verify_callback(headers_at(NOW + timedelta(minutes=4)), BODY, NOW)


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (headers_at(NOW, secret="another-secret"), BODY),  # wrong secret
        (headers_at(NOW), BODY.replace(b"19900", b"99900")),  # altered body
        (headers_at(NOW - timedelta(minutes=6)), BODY),  # 6 minutes old
        (headers_at(NOW + timedelta(minutes=6)), BODY),  # 6 minutes in the future
        ({TIMESTAMP_HEADER: str(int(NOW.timestamp()))}, BODY),  # no signature
        ({SIGNATURE_HEADER: sign(SECRET, int(NOW.timestamp()), BODY)}, BODY),  # no timestamp
        ({**headers_at(NOW), SIGNATURE_HEADER: "00" * 32}, BODY),  # a wrong digest
        ({**headers_at(NOW), SIGNATURE_HEADER: "ünïcode"}, BODY),  # not even hex
        ({**headers_at(NOW), TIMESTAMP_HEADER: "yesterday"}, BODY),  # not Unix seconds
        ({}, BODY),
    ],
    ids=[
        "wrong-secret",
        "altered-body",
        "6-min-old",
        "6-min-future",
        "no-signature",
        "no-timestamp",
        "wrong-digest",
        "non-hex",
        "bad-timestamp",
        "no-headers",
    ],
)
def test_a_callback_that_is_not_genuine_and_fresh_is_rejected(
    channel: SimbankChannel, headers: dict[str, str], body: bytes
) -> None:
    with pytest.raises(InvalidSignature) as caught:
        channel.verify_callback(headers, body, NOW)
    assert caught.value.code == "INVALID_SIGNATURE"
    assert isinstance(caught.value, IdempayError)


def test_the_signature_is_checked_before_the_body_is_parsed(channel: SimbankChannel) -> None:
    with pytest.raises(InvalidSignature):
        channel.verify_callback(headers_at(NOW, body=b"{"), b"not json", NOW)


def test_a_genuine_but_malformed_callback_is_an_invalid_request(channel: SimbankChannel) -> None:
    body = b'{"notify_id": "ntf_1", "status": "SUCCESS"}'
    with pytest.raises(InvalidRequest):
        channel.verify_callback(headers_at(NOW, body=body), body, NOW)


def test_a_callback_announcing_a_non_final_status_is_an_invalid_request(
    channel: SimbankChannel,
) -> None:
    body = BODY.replace(b'"SUCCESS"', b'"PROCESSING"')
    with pytest.raises(InvalidRequest):
        channel.verify_callback(headers_at(NOW, body=body), body, NOW)
