"""PostgreSQL-only bits: the migration lock (an advisory lock)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_MIGRATE_LOCK = 0x1DE3BA7  # any constant shared by every idempay process


async def lock_migrations(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATE_LOCK})


async def unlock_migrations(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATE_LOCK})
