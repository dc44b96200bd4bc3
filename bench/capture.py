"""Capture the SQL idempay sends for one first charge and turn it into pgbench scripts.

One keyed `POST /v1/payments` runs in-process (the FastAPI app over httpx's ASGI transport, the
scripted instant channel) against a fresh PostgreSQL database, after one warm-up charge. SQLAlchemy
events on both of idempay's pools (transactions, and autocommit for one-statement reads and
writes) record, in order, every checkout, every statement with its parameters (asyncpg's
positional `$n`; an executemany becomes the one multi-row INSERT it is on the wire), and COMMIT.
`python -m bench.capture` rewrites bench/sql/first_charge_*.sql from that capture; `python -m bench`
does it on every run.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event

from bench import pg

SQL_DIR = Path(__file__).parent / "sql"
BIZ_NO, ORDER_NO, KEY = "CAPTUREBIZ", "CAPTUREORDER", "CAPTUREKEY"
MERCHANT_ID = "mch_" + "0" * 28
KEY_HASH = hashlib.sha256(b"bench").hexdigest()
RANDOM = "random(1, 1000000000000000000)"
# Generated identifiers (prefix, 12 hex of ms, 16 random hex) -> pgbench expressions.
VARS = {"pay": "bench_pay", "req": "bench_req", "evt": "bench_evt"}
_ID = re.compile(r"\b(pay|req|evt|mch)_[0-9a-f]{28}\b")
_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?")
_PARAM = re.compile(r"\$(\d+)")


@dataclass
class Use:
    """One checkout of a pooled connection: its statements and how it ended (`autocommit`: no
    transaction, each statement is one round trip)."""

    statements: list[tuple[str, list[Any]]] = field(default_factory=list)
    end: str = "ROLLBACK"
    autocommit: bool = False

    @property
    def writes(self) -> bool:
        return any(
            s.lstrip().split()[0] in ("INSERT", "UPDATE", "DELETE") for s, _ in self.statements
        )


async def capture_uses(database_url: str) -> list[Use]:
    """Run a warm-up charge and a captured keyed charge; the captured charge's connection uses."""
    from idempay import bootstrap, logs
    from idempay.api.app import create_app
    from idempay.channels.scripted import ScriptedChannel
    from idempay.config import Settings

    logs.configure("json", level=logging.WARNING)
    settings = Settings(database_url=database_url, log_format="json")
    container = await bootstrap.build(settings, channels={"simbank": ScriptedChannel("simbank")})
    try:
        _, api_key = await bootstrap.create_principal(container.store, "capture", operator=False)
        uses: list[Use] = []
        _listen(container.engine.sync_engine, uses, autocommit=False)
        if container.store.autocommit is not None:
            _listen(container.store.autocommit.sync_engine, uses, autocommit=True)
        transport = httpx.ASGITransport(app=create_app(container))
        async with httpx.AsyncClient(transport=transport, base_url="http://capture") as client:
            for biz_no, key in (("WARMUPBIZ", "WARMUPKEY"), (BIZ_NO, KEY)):
                uses.clear()
                body = {
                    "biz_no": biz_no,
                    "order_no": ORDER_NO,
                    "amount": 19900,
                    "currency": "CNY",
                    "channel": "simbank",
                }
                headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}
                answer = await client.post("/v1/payments", json=body, headers=headers)
                if answer.status_code != 201:
                    raise RuntimeError(
                        f"capture charge answered {answer.status_code}: {answer.text}"
                    )
        return [u for u in uses if u.statements]
    finally:
        await container.aclose()


def _listen(sync_engine: Any, uses: list[Use], *, autocommit: bool) -> None:
    mine: list[Use] = []  # this pool's current checkout (the two pools' uses interleave)

    @event.listens_for(sync_engine.pool, "checkout")
    def _checkout(*_: Any) -> None:
        mine[:] = [Use(autocommit=autocommit)]
        uses.append(mine[0])

    @event.listens_for(sync_engine, "before_cursor_execute")
    def _sql(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, many: bool) -> None:
        mine[0].statements.append(_one_statement(statement, params, many))

    @event.listens_for(sync_engine, "commit")
    def _commit(_c: Any) -> None:
        mine[0].end = "COMMIT"


# --- translation to pgbench ----------------------------------------------------------------------


def _id_expr(kind: str) -> str:
    if kind == "mch":
        return f"'{MERCHANT_ID}'"
    return f"('{kind}_' || lpad(to_hex(:{VARS[kind]}::bigint), 28, '0'))"


def _normalize(text: str) -> str:
    """Fixed stand-ins (same length) for generated ids, hashes and times inside string literals."""
    text = _ID.sub(lambda m: f"{m.group(1)}_" + "0" * 28, text)
    text = _HEX64.sub(KEY_HASH, text)
    return _ISO.sub(lambda m: "2026-01-01T00:00:00" + ((m.group(1) or "") and ".000000"), text)


def _literal(value: Any, t0: datetime) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float) and not isinstance(value, Enum):
        return repr(value)
    if isinstance(value, datetime):
        delta = (value - t0).total_seconds()
        now = "(now() AT TIME ZONE 'UTC')"
        return now if abs(delta) < 0.5 else f"({now} + interval '{delta:.0f} seconds')"
    text = value.value if isinstance(value, Enum) else str(value)
    if m := _ID.fullmatch(text):
        return _id_expr(m.group(1))
    if text == BIZ_NO:
        return f"('BZ' || :{VARS['pay']}::text)"
    if text == KEY:
        return f"('K' || :{VARS['pay']}::text)"
    return _quote(_normalize(text))


def _quote(text: str) -> str:
    """A SQL string literal. pgbench (-M prepared) takes `:name` anywhere, even inside quotes, for
    a variable: a colon in a literal is written as the escape \\x3a of an E'' string instead."""
    quoted = text.replace("'", "''")
    if ":" not in quoted:
        return f"'{quoted}'"
    return "E'" + quoted.replace("\\", "\\\\").replace(":", "\\x3a") + "'"


def _one_statement(sql: str, params: Any, many: bool) -> tuple[str, list[Any]]:
    """(SQL, flat positional parameters). An executemany INSERT is sent by asyncpg in one round
    trip: it is written as the single multi-row INSERT that does the same work."""
    if not many:
        return sql, list(params or ())
    head, sep, row = sql.partition(" VALUES ")
    if not sep or not sql.lstrip().upper().startswith("INSERT"):
        raise ValueError(f"cannot turn an executemany into one statement: {sql[:80]}")
    width = len(params[0])
    rows = [
        _PARAM.sub(lambda m, k=k: f"${int(m.group(1)) + k * width}", row)
        for k in range(len(params))
    ]
    return f"{head} VALUES {', '.join(rows)}", [v for p in params for v in p]


def _statement(sql: str, params: list[Any], t0: datetime) -> str:
    rendered = _PARAM.sub(lambda m: _literal(params[int(m.group(1)) - 1], t0), sql)
    return " ".join(rendered.split()) + ";"


def _first_time(uses: list[Use]) -> datetime:
    for use in uses:
        for _, params in use.statements:
            for value in params:
                if isinstance(value, datetime):
                    return value
    raise ValueError("no timestamp in the captured statements")


HEADER = """\
-- GENERATED by `python -m bench.capture` (bench/capture.py); do not edit by hand.
-- {what}
-- Source: one keyed first charge (POST /v1/payments with an Idempotency-Key, the in-process
-- scripted channel) run through the FastAPI app against PostgreSQL; SQLAlchemy events recorded
-- each pool checkout, each statement with its parameters, and COMMIT/ROLLBACK, in order.
-- Translation: bound parameters become literals, except generated ids (payment, instruction,
-- event), biz_no and Idempotency-Key, which come from the random integers below, so every
-- pgbench transaction inserts new keys. Timestamps become now() (+ the captured offset);
-- ids, hashes and times inside longer strings (reasons, JSON) are replaced by fixed
-- same-length stand-ins. The merchant is the fixed row created by the floor's setup.
-- Run with: pgbench -n -M prepared -f <this file> -c N -j min(N,2) -T secs
"""


def script(uses: list[Use], *, wire: bool) -> str:
    t0 = _first_time(uses)
    if wire:
        what = (
            "WIRE: every round trip of the request, reads included (the autocommit pool's\n"
            "-- statements stand alone; the transactions' are BEGIN ... COMMIT/ROLLBACK)."
        )
    else:
        what = (
            "WRITES: the write statements only (A: create, B: record the answer; the key's\n"
            "-- answer, one autocommit UPDATE)."
        )
    lines = [HEADER.format(what=what)]
    lines += [f"\\set {var} {RANDOM}" for var in VARS.values()]
    for use in uses:
        if not wire and not use.writes:
            continue
        statements = [_statement(sql, params, t0) for sql, params in use.statements]
        lines += statements if use.autocommit else ["BEGIN;", *statements, f"{use.end};"]
    return "\n".join(lines) + "\n"


def setup_sql() -> str:
    """The fixed merchant the scripts refer to (the wire script looks its key hash up)."""
    return (
        "INSERT INTO merchants (id, name, api_key_hash, created_at) VALUES "
        f"('{MERCHANT_ID}', 'bench', '{KEY_HASH}', now() AT TIME ZONE 'UTC')"
    )


@dataclass(frozen=True)
class Captured:
    writes: Path
    wire: Path
    round_trips: dict[str, int]


def _trips(use: Use) -> int:
    return len(use.statements) + (0 if use.autocommit else 2)  # + BEGIN, COMMIT/ROLLBACK


def round_trips(uses: list[Use]) -> dict[str, int]:
    written = [u for u in uses if u.writes]
    return {
        "checkouts": len(uses),
        "statements": sum(len(u.statements) for u in uses),
        "write_transactions": sum(1 for u in written if not u.autocommit),
        "write_statements": sum(len(u.statements) for u in written),
        "wire_round_trips": sum(_trips(u) for u in uses),
        "writes_round_trips": sum(_trips(u) for u in written),
    }


def capture_scripts(out_dir: Path = SQL_DIR) -> Captured:
    """Capture on a throw-away database; write first_charge_{writes,wire}.sql into `out_dir`."""
    with pg.fresh_db("capture") as db:
        uses = asyncio.run(capture_uses(pg.url(db)))
    out_dir.mkdir(parents=True, exist_ok=True)
    writes, wire = out_dir / "first_charge_writes.sql", out_dir / "first_charge_wire.sql"
    writes.write_text(script(uses, wire=False))
    wire.write_text(script(uses, wire=True))
    return Captured(writes, wire, round_trips(uses))


if __name__ == "__main__":
    captured = capture_scripts()
    print(f"wrote {captured.writes} and {captured.wire}: {captured.round_trips}")
