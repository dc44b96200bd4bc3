"""Throw-away databases for tests: a random name per test on each backend, dropped afterwards.

Under CI=true a backend that does not answer fails the test instead of skipping it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

PG_ADMIN = os.environ.get("IDEMPAY_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MY_ADMIN = os.environ.get("IDEMPAY_TEST_MYSQL", "mysql+asyncmy://root@127.0.0.1:3306/test")
BACKENDS = ("sqlite", "postgresql", "mariadb")
PORTS = {"postgresql": 5432, "mariadb": 3306, "redis": 6379}


def require(service: str) -> None:
    """Skip (locally) or fail (CI=true) when `service` does not accept connections."""
    try:
        with socket.create_connection(("127.0.0.1", PORTS[service]), timeout=2):
            return
    except OSError as e:
        message = f"{service} is not reachable on 127.0.0.1:{PORTS[service]}: {e}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


async def _admin(url: str, sql: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def create(backend: str, tmp_path: Path) -> tuple[str, str]:
    """Create a fresh database; answer (IDEMPAY_DATABASE_URL, name)."""
    name = f"idempay_t_{secrets.token_hex(6)}"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / (name + '.db')}", name
    require(backend)
    if backend == "postgresql":
        asyncio.run(_admin(PG_ADMIN, f"CREATE DATABASE {name}"))
        return f"postgresql://postgres@127.0.0.1:5432/{name}", name
    asyncio.run(
        _admin(MY_ADMIN, f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    )
    return f"mysql://root@127.0.0.1:3306/{name}", name


def drop(backend: str, name: str) -> None:
    if backend == "postgresql":
        asyncio.run(_admin(PG_ADMIN, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    elif backend == "mariadb":
        asyncio.run(_admin(MY_ADMIN, f"DROP DATABASE IF EXISTS {name}"))
