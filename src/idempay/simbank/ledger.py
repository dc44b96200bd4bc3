"""The simulator's own state, in its own SQLite file: every execution (the ledger, the ground
truth of what was charged) and the closed request_ids. Short synchronous statements, WAL."""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

SCHEMA_VERSION = 1
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS executions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        request_id TEXT NOT NULL, kind TEXT NOT NULL, payment_ref TEXT NOT NULL,
        receiver_id TEXT, amount INTEGER NOT NULL, currency TEXT NOT NULL,
        status TEXT NOT NULL, settle_to TEXT, reason TEXT,
        channel_txn_id TEXT NOT NULL UNIQUE, notify_url TEXT,
        executed_at TEXT NOT NULL, day TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS executions_request ON executions (request_id, seq)",
    "CREATE INDEX IF NOT EXISTS executions_day ON executions (day, seq)",
    "CREATE INDEX IF NOT EXISTS executions_payment ON executions (payment_ref, seq)",
    """CREATE TABLE IF NOT EXISTS closed (
        request_id TEXT PRIMARY KEY, kind TEXT NOT NULL, closed_at TEXT NOT NULL)""",
)
_COLUMNS = (
    "seq, request_id, kind, payment_ref, receiver_id, amount, currency, status, reason, "
    "channel_txn_id, executed_at, notify_url, settle_to"
)


def iso(moment: datetime) -> str:
    """UTC, microseconds, a trailing Z: 2026-11-30T06:00:00.123456Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Op:
    """One validated operation request (PAY, REFUND or SPLIT)."""

    request_id: str
    kind: str
    payment_ref: str
    amount: int
    currency: str
    receiver_id: str | None = None
    notify_url: str | None = None


@dataclass(frozen=True, slots=True)
class Execution:
    """One row of the ledger: an operation the simulator executed, with its current status."""

    seq: int
    request_id: str
    kind: str
    payment_ref: str
    receiver_id: str | None
    amount: int
    currency: str
    status: str  # SUCCESS | FAILED | PROCESSING
    reason: str | None
    channel_txn_id: str
    executed_at: str
    notify_url: str | None = None
    settle_to: str | None = None  # PROCESSING only: the status it will settle to

    def same_request(self, op: Op) -> bool:
        mine = (self.kind, self.payment_ref, self.amount, self.currency, self.receiver_id)
        return mine == (op.kind, op.payment_ref, op.amount, op.currency, op.receiver_id)

    def public(self) -> dict[str, Any]:
        """The wire form: operation answers, queries, the ledger and statements."""
        return {
            "request_id": self.request_id,
            "kind": self.kind,
            "payment_ref": self.payment_ref,
            "receiver_id": self.receiver_id,
            "amount": self.amount,
            "currency": self.currency,
            "status": self.status,
            "reason": self.reason,
            "channel_txn_id": self.channel_txn_id,
            "executed_at": self.executed_at,
        }


class Ledger:
    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._migrate()

    def _migrate(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version < SCHEMA_VERSION:
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close_db(self) -> None:
        self._db.close()

    def record(
        self, op: Op, status: str, reason: str | None, settle_to: str | None, now: datetime
    ) -> Execution:
        txn_id = f"sbt_{secrets.token_hex(10)}"
        cur = self._db.execute(
            "INSERT INTO executions (request_id, kind, payment_ref, receiver_id, amount, currency,"
            " status, settle_to, reason, channel_txn_id, notify_url, executed_at, day)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                op.request_id,
                op.kind,
                op.payment_ref,
                op.receiver_id,
                op.amount,
                op.currency,
                status,
                settle_to,
                reason,
                txn_id,
                op.notify_url,
                iso(now),
                now.date().isoformat(),
            ),
        )
        return Execution(
            seq=int(cur.lastrowid or 0),
            request_id=op.request_id,
            kind=op.kind,
            payment_ref=op.payment_ref,
            receiver_id=op.receiver_id,
            amount=op.amount,
            currency=op.currency,
            status=status,
            reason=reason,
            channel_txn_id=txn_id,
            executed_at=iso(now),
            notify_url=op.notify_url,
            settle_to=settle_to,
        )

    def first(self, request_id: str) -> Execution | None:
        """The first execution of `request_id`: what an idempotent repeat and a query answer."""
        rows = self._select("WHERE request_id = ? ORDER BY seq LIMIT 1", request_id)
        return rows[0] if rows else None

    def settle(self, seq: int, reason: str | None) -> Execution | None:
        """PROCESSING -> its settle_to; None when it was not PROCESSING (already settled, reset)."""
        cur = self._db.execute(
            "UPDATE executions SET status = settle_to, settle_to = NULL, reason = ?"
            " WHERE seq = ? AND status = 'PROCESSING' AND settle_to IS NOT NULL",
            (reason, seq),
        )
        if cur.rowcount != 1:
            return None
        return self._select("WHERE seq = ?", seq)[0]

    def pending(self) -> list[Execution]:
        return self._select("WHERE status = 'PROCESSING' ORDER BY seq")

    def executions(self, payment_ref: str | None = None) -> list[Execution]:
        if payment_ref is None:
            return self._select("ORDER BY seq")
        return self._select("WHERE payment_ref = ? ORDER BY seq", payment_ref)

    def on_day(self, day: date) -> list[Execution]:
        return self._select("WHERE day = ? ORDER BY seq", day.isoformat())

    def close(self, request_id: str, kind: str, now: datetime) -> str:
        """Close `request_id` for good; the time it was (first) closed."""
        self._db.execute(
            "INSERT OR IGNORE INTO closed (request_id, kind, closed_at) VALUES (?, ?, ?)",
            (request_id, kind, iso(now)),
        )
        closed_at = self.closed_at(request_id)
        assert closed_at is not None
        return closed_at

    def closed_at(self, request_id: str) -> str | None:
        row = self._db.execute(
            "SELECT closed_at FROM closed WHERE request_id = ?", (request_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def reset(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("DELETE FROM executions")
        self._db.execute("DELETE FROM closed")
        self._db.execute("COMMIT")

    def _select(self, where: str, *args: object) -> list[Execution]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM executions {where}", args).fetchall()
        return [Execution(*row) for row in rows]
