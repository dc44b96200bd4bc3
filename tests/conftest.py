"""Shared fixtures: a fresh database per test on each backend, containers with scripted channels."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.config import Settings
from tests import dbs


@pytest.fixture(params=dbs.BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url, name = dbs.create(request.param, tmp_path)
    yield url
    dbs.drop(request.param, name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'idempay.db'}"


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    url, name = dbs.create("postgresql", tmp_path)
    yield url
    dbs.drop("postgresql", name)


@pytest.fixture
def channel() -> ScriptedChannel:
    return ScriptedChannel("scripted")


@pytest.fixture
async def container(
    database_url: str, channel: ScriptedChannel
) -> AsyncIterator[bootstrap.Container]:
    settings = Settings(database_url=database_url, channel_timeout_s=2.0)
    c = await bootstrap.build(settings, channels={"scripted": channel})
    yield c
    await c.aclose()


@pytest.fixture
async def merchant(container: bootstrap.Container) -> str:
    merchant_id, _key = await bootstrap.create_principal(container.store, "acme", operator=False)
    return merchant_id
