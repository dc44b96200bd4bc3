"""Bulk rows for the growth scenario: N existing payments with everything a real first charge
leaves behind (its instruction, four transition rows, one delivered outbox event, one answered
Idempotency-Key record), by multi-row INSERT ... SELECT generate_series, in chunks.

Ids follow idempay's `new_id` shape (prefix, 12 hex digits of milliseconds, 16 hex) with times in
the past, so the rows sort before anything the benchmark creates, as old rows do in production.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from bench import pg

CHUNK = 500_000
_T = "(timestamp '2026-01-01' + g * interval '1 millisecond')"  # naive UTC, in the past


def _id(prefix: str) -> str:
    return f"'{prefix}_' || lpad(to_hex(1700000000000 + g), 12, '0') || lpad(to_hex(g), 16, '0')"


def _statements(merchant_id: str) -> list[str]:
    pay, req, evt = _id("pay"), _id("req"), _id("evt")
    digest = "md5(g::text) || md5((g + 1)::text)"
    body = (
        '\'{"id":"\' || ' + pay + ' || \'","biz_no":"G\' || g || \'","order_no":"GO\' || g'
        ' || \'","amount":19900,"currency":"CNY","channel":"simbank","status":'
        '"SUCCESS","attempt":1,"refunded_amount":0,"split_amount":0,"description":'
        'null,"notify_url":null,"instructions":[{"request_id":"\' || ' + req + " || "
        '\'","status":"SUCCESS","query_count":0}],"created_at":"2026-01-01T00:00:00Z"'
        ',"updated_at":"2026-01-01T00:00:00Z"}\''
    )
    m = f"'{merchant_id}'"
    return [
        f"""INSERT INTO payments (id, merchant_id, biz_no, order_no, amount, currency, channel,
            status, attempt, refunded_amount, split_amount, reserved_amount, version, created_at,
            updated_at)
            SELECT {pay}, {m}, 'G' || g, 'GO' || g, 19900, 'CNY', 'simbank', 'SUCCESS', 1, 0, 0,
            0, 2, {_T}, {_T} FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g""",
        f"""INSERT INTO instructions (request_id, merchant_id, payment_id, owner_kind, owner_id,
            kind, channel, amount, currency, status, attempt, digest, send_count, query_count,
            next_query_at, channel_txn_id, version, created_at, updated_at)
            SELECT {req}, {m}, {pay}, 'payment', {pay}, 'PAY', 'simbank', 19900, 'CNY', 'SUCCESS',
            1, {digest}, 1, 0, {_T} + interval '30 seconds', 'sc' || g, 2, {_T}, {_T}
            FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g""",
        f"""INSERT INTO transitions (entity, entity_id, from_status, to_status, reason, actor,
            created_at)
            SELECT t.entity, CASE WHEN t.entity = 'payment' THEN {pay} ELSE {req} END, t.frm,
            t.too, t.reason, t.actor, {_T}
            FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g CROSS JOIN (VALUES
            ('payment', NULL, 'PROCESSING', 'created; instruction written', 'merchant:bench'),
            ('instruction', NULL, 'PENDING', 'written before sending', 'merchant:bench'),
            ('instruction', 'PENDING', 'SUCCESS', 'channel answered SUCCESS', 'channel'),
            ('payment', 'PROCESSING', 'SUCCESS', 'instruction SUCCESS: channel answered SUCCESS',
             'channel')) AS t(entity, frm, too, reason, actor)""",
        f"""INSERT INTO outbox (id, merchant_id, kind, object_id, data, status, attempts,
            next_attempt_at, delivered_at, created_at)
            SELECT {evt}, {m}, 'payment.success', {pay}, {body}, 'DELIVERED', 1, {_T}, {_T}, {_T}
            FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g""",
        f"""INSERT INTO idempotency_keys (merchant_id, key, fingerprint, resource_id,
            response_status, response_body, created_at, expires_at)
            SELECT {m}, 'GK' || g, {digest}, {pay}, 201, {body}, {_T},
            now() AT TIME ZONE 'UTC' + interval '1 day'
            FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g""",
    ]


def load(db: str, merchant_id: str, start: int, end: int, say: Callable[[str], None]) -> float:
    """Rows for payments number start+1 .. end; the seconds it took (VACUUM ANALYZE included)."""
    t0 = time.monotonic()
    statements = _statements(merchant_id)
    for lo in range(start + 1, end + 1, CHUNK):
        hi = min(end, lo + CHUNK - 1)
        for sql in statements:
            pg.execute(db, sql, {"lo": lo, "hi": hi})
        say(f"growth: loaded payments {lo:,}..{hi:,} ({time.monotonic() - t0:.0f} s)")
    pg.execute(db, "VACUUM ANALYZE")
    return time.monotonic() - t0


def merchant_of(db: str) -> str:
    return str(pg.execute(db, "SELECT id FROM merchants ORDER BY created_at LIMIT 1")[0][0])
