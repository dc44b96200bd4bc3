"""SQLite-only bits: WAL, busy timeout, and BEGIN IMMEDIATE for write transactions."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

WRITE_OPTION = "idempay_write"


def configure(engine: AsyncEngine, *, busy_timeout_ms: int = 30_000) -> None:
    """A deferred transaction that later writes can fail with "database is locked" instead of
    waiting; write transactions therefore begin IMMEDIATE (they queue on the busy timeout)."""

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class WriterQueue:
    """An asyncio lock per event loop: a store may be used from several loops (threads)."""

    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}

    def _lock(self) -> asyncio.Lock:
        key = id(asyncio.get_running_loop())
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def __aenter__(self) -> None:
        await self._lock().acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._lock().release()
