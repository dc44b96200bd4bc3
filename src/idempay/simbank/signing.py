"""The simbank callback signature: hex HMAC-SHA256 over f"{timestamp}.{body}" with the shared
secret, in two headers; both sides of the wire (simulator and adapter) use this module."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime

from idempay.channels.errors import InvalidSignature

TIMESTAMP_HEADER = "X-Simbank-Timestamp"
SIGNATURE_HEADER = "X-Simbank-Signature"
TOLERANCE_S = 300  # a timestamp further than this from now, past or future, is rejected


def sign(secret: str, timestamp: int, body: bytes) -> str:
    message = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The headers of one callback delivery (`timestamp` in Unix seconds)."""
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    now: datetime,
    tolerance_s: int = TOLERANCE_S,
) -> None:
    """Raise InvalidSignature unless `body` was signed with `secret` within `tolerance_s` of
    `now`. Runs on the raw bytes, before anything parses them."""
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ts = lower.get(TIMESTAMP_HEADER.lower())
    signature = lower.get(SIGNATURE_HEADER.lower())
    if not raw_ts or not signature:
        raise InvalidSignature(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header")
    if not raw_ts.isascii() or not raw_ts.isdigit() or len(raw_ts) > 12:
        raise InvalidSignature(f"{TIMESTAMP_HEADER} must be Unix seconds")
    timestamp = int(raw_ts)
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().encode("utf-8", "replace")):
        raise InvalidSignature("signature does not match the body")
    if abs(now.timestamp() - timestamp) > tolerance_s:
        raise InvalidSignature(f"timestamp is more than {tolerance_s}s away from now")
