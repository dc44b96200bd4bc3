"""End-to-end fixtures: one `idempay serve` subprocess per database backend for the session, a
fresh merchant per test (merchants never see each other's objects), an HTTP client. Here
`merchant` is an HTTP principal (id and API key), not the root conftest's bare merchant id."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests import dbs
from tests.e2e.server import Principal, Server


@pytest.fixture(scope="session", params=dbs.BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    workdir: Path = tmp_path_factory.mktemp(f"serve-{request.param}")
    url, name = dbs.create(request.param, workdir)
    srv = Server(url, workdir).start()
    try:
        yield srv
    finally:
        srv.stop()
        dbs.drop(request.param, name)


@pytest.fixture
async def merchant(server: Server) -> Principal:
    return await server.db.principal("acme")


@pytest.fixture
async def other_merchant(server: Server) -> Principal:
    return await server.db.principal("globex")


@pytest.fixture
async def operator(server: Server) -> Principal:
    return await server.db.principal("alice", operator=True)


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        yield c
