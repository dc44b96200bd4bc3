"""MariaDB/MySQL-only bits: the live-instruction guard (no partial indexes), the migration lock."""

from __future__ import annotations

from sqlalchemy import DDL, text
from sqlalchemy.ext.asyncio import AsyncConnection


def mysql_live_instruction_ddl(live_condition: str) -> DDL:
    """MariaDB has no partial index: a STORED generated column that holds `owner_id` only while
    the instruction is live (NULL otherwise), under a UNIQUE index. NULLs never collide, so the
    database itself allows at most one live instruction per owner."""
    return DDL(  # type: ignore[no-untyped-call]
        "ALTER TABLE instructions "
        f"ADD COLUMN live_owner_id VARCHAR(48) AS (CASE WHEN {live_condition} "
        "THEN owner_id END) STORED, "
        "ADD UNIQUE INDEX uq_instructions_live (live_owner_id)"
    ).execute_if(dialect="mysql")


async def lock_migrations(conn: AsyncConnection) -> None:
    """Serialise concurrent `migrate` runs (several nodes starting at once)."""
    await conn.execute(text("SELECT GET_LOCK('idempay_migrate', 60)"))


async def unlock_migrations(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT RELEASE_LOCK('idempay_migrate')"))
