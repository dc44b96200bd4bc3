"""Create or upgrade the schema with Alembic, serialised across processes."""

from __future__ import annotations

from importlib.resources import files

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from idempay.storage import mysql, postgres
from idempay.storage.sqlite import WRITE_OPTION


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(files("idempay.storage") / "migrations"))
    return cfg


def _upgrade(conn: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


async def upgrade(engine: AsyncEngine) -> None:
    """Bring the schema to head. Safe to run from many processes at once."""
    backend = engine.dialect.name
    async with engine.connect() as conn:
        if backend == "postgresql":
            await postgres.lock_migrations(conn)
        elif backend == "mysql":
            await mysql.lock_migrations(conn)
        await conn.commit()
        try:
            conn = await conn.execution_options(**{WRITE_OPTION: True})
            await conn.run_sync(_upgrade)
            await conn.commit()
        finally:
            if backend == "postgresql":
                await postgres.unlock_migrations(conn)
            elif backend == "mysql":
                await mysql.unlock_migrations(conn)
            await conn.commit()
