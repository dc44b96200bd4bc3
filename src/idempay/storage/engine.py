"""Turns IDEMPAY_DATABASE_URL into an async engine with the driver idempay chooses."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from idempay.storage import sqlite

DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    # asyncpg: a third of psycopg 3's CPU per statement under SQLAlchemy here (bench/README.md)
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "mysql": "mysql+asyncmy",
    "mariadb": "mysql+asyncmy",
}


def async_url(url: str) -> URL:
    """`postgresql://…` -> `postgresql+asyncpg://…`, `mysql://…` -> `mysql+asyncmy://…`, …"""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in DRIVERS:
        raise ValueError(f"unsupported database {backend!r}: use sqlite, postgresql or mysql")
    parsed = parsed.set(drivername=DRIVERS[backend])
    if backend in ("mysql", "mariadb") and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def create_engine(url: str, *, pool_size: int = 10, null_pool: bool = False) -> AsyncEngine:
    u = async_url(url)
    kwargs: dict[str, object] = {}
    if null_pool:
        kwargs["poolclass"] = NullPool
    elif u.get_backend_name() != "sqlite":
        # no pre-ping: it costs a round trip on every checkout (bench/README.md); a connection
        # the server dropped fails its statement instead, and is recycled before servers'
        # usual idle timeouts
        # with create_autocommit_engine's half: 2 x pool_size connections at most, as before
        kwargs.update(pool_size=pool_size, max_overflow=pool_size // 2, pool_recycle=1800)
    if u.get_backend_name() == "mysql":
        kwargs["isolation_level"] = "READ COMMITTED"
    engine = create_async_engine(u, **kwargs)
    if u.get_backend_name() == "sqlite":
        sqlite.configure(engine)
    return engine


def create_autocommit_engine(
    url: str, *, pool_size: int = 10, null_pool: bool = False
) -> AsyncEngine | None:
    """A second pool for statements that stand alone (reads, a one-statement write): in
    autocommit each is one round trip instead of BEGIN, statement, ROLLBACK/COMMIT. None on
    SQLite, whose reads open no transaction and whose writers queue in process anyway."""
    u = async_url(url)
    if u.get_backend_name() == "sqlite":
        return None
    kwargs: dict[str, object] = {"isolation_level": "AUTOCOMMIT"}
    if null_pool:
        kwargs["poolclass"] = NullPool
    else:
        # one-round-trip reads hold a connection briefly: half the transactions' pool is plenty
        kwargs.update(pool_size=max(1, pool_size // 2), max_overflow=0, pool_recycle=1800)
    return create_async_engine(u, **kwargs)
