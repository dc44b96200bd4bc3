"""UNKNOWN instructions for the worker scenario: the rows a charge leaves when its answer was lost
(a payment and its one PAY instruction, both UNKNOWN, the query already due), written in one
COPY transaction so they become due all at once, and what the worker made of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.rows import TupleRow

from bench import pg
from idempay.domain.model import digest, new_id

CHANNEL = "simbank"  # the channel's name in IDEMPAY_CHANNELS
AGE = timedelta(hours=1)  # old enough that "not found" is believed (IDEMPAY_NOT_FOUND_GRACE_MS)

_PAYMENT_COLUMNS = (
    "id, merchant_id, biz_no, order_no, amount, currency, channel, status, attempt,"
    " refunded_amount, split_amount, reserved_amount, version, created_at, updated_at"
)
_INSTRUCTION_COLUMNS = (
    "request_id, merchant_id, payment_id, owner_kind, owner_id, kind, channel, amount, currency,"
    " status, attempt, digest, send_count, query_count, next_query_at, version, created_at,"
    " updated_at"
)


@dataclass(frozen=True)
class Unknown:
    """One lost answer: `executed` says whether the simulator really ran it."""

    request_id: str
    payment_id: str
    amount: int
    executed: bool


def make(n: int, *, never_executed: int = 0) -> list[Unknown]:
    """`n` payments the simulator will have executed, then `never_executed` it never received."""
    created = datetime.now(UTC) - AGE
    return [
        Unknown(new_id("req", created), new_id("pay", created), 1000 + i % 500, i < n)
        for i in range(n + never_executed)
    ]


def save(rows: list[Unknown], path: Path) -> Path:
    """The rows as JSON, for the subprocess that executes and queries them."""
    path.write_text(json.dumps([[u.request_id, u.payment_id, u.amount, u.executed] for u in rows]))
    return path


def load(path: Path) -> list[Unknown]:
    return [Unknown(r, p, a, e) for r, p, a, e in json.loads(path.read_text())]


def insert(db: str, merchant_id: str, rows: list[Unknown]) -> datetime:
    """COPY the payments and instructions in one transaction; the (naive UTC) time of its commit,
    from which resolution is timed (a running worker can see none of them before)."""
    now = datetime.now(UTC).replace(tzinfo=None)
    created, due = now - AGE, now - timedelta(minutes=1)
    with psycopg.connect(pg.dsn(db)) as conn:
        with conn.cursor() as cur:
            with cur.copy(f"COPY payments ({_PAYMENT_COLUMNS}) FROM STDIN") as copy:
                for i, u in enumerate(rows):
                    biz = (f"W{i}", f"WO{i}", u.amount, "CNY", CHANNEL)
                    copy.write_row(
                        [
                            u.payment_id,
                            merchant_id,
                            *biz,
                            "UNKNOWN",
                            1,
                            0,
                            0,
                            0,
                            2,
                            created,
                            created,
                        ]
                    )
            with cur.copy(f"COPY instructions ({_INSTRUCTION_COLUMNS}) FROM STDIN") as copy:
                for u in rows:
                    owner = (u.payment_id, "payment", u.payment_id, "PAY", CHANNEL)
                    state = ("UNKNOWN", 1, _digest(u), 1, 0, due, 2, created, created)
                    copy.write_row([u.request_id, merchant_id, *owner, u.amount, "CNY", *state])
        conn.commit()
        return datetime.now(UTC).replace(tzinfo=None)


def _digest(u: Unknown) -> str:
    """What the charge path stores: the digest of the body it sent (services/sending.py)."""
    body = {
        "request_id": u.request_id,
        "kind": "PAY",
        "payment_ref": u.payment_id,
        "amount": u.amount,
        "currency": "CNY",
        "receiver_id": None,
    }
    return digest(body)


def terminal(conn: psycopg.Connection[TupleRow]) -> int:
    """Instructions no longer live (SUCCESS or FAILED): the poll while the worker runs."""
    row = conn.execute(
        "SELECT count(*) FROM instructions WHERE status IN ('SUCCESS', 'FAILED')"
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Outcome:
    instructions: dict[str, int]  # status -> count
    payments: dict[str, int]
    wrong: list[str]  # request_ids whose instruction did not end as the simulator says
    last_change: datetime | None  # naive UTC: the last resolution's commit, near enough


def outcome(db: str, rows: list[Unknown]) -> Outcome:
    """Statuses by count, and every instruction checked: SUCCESS (payment SUCCESS) where the
    simulator executed it, FAILED (payment FAILED: closed, never received) where it did not."""
    expected = {u.request_id: "SUCCESS" if u.executed else "FAILED" for u in rows}
    with psycopg.connect(pg.dsn(db), autocommit=True) as conn:
        found = conn.execute(
            "SELECT i.request_id, i.status, p.status FROM instructions i"
            " JOIN payments p ON p.id = i.payment_id"
        ).fetchall()
        last = conn.execute("SELECT max(updated_at) FROM payments").fetchone()
    ins: dict[str, int] = {}
    pay: dict[str, int] = {}
    wrong = []
    for request_id, i_status, p_status in found:
        ins[i_status] = ins.get(i_status, 0) + 1
        pay[p_status] = pay.get(p_status, 0) + 1
        if not i_status == p_status == expected.get(request_id):
            wrong.append(str(request_id))
    wrong += sorted(set(expected) - {str(r[0]) for r in found})
    return Outcome(ins, pay, wrong, last[0] if last else None)
