"""Fixtures of the channel tests: one `idempay simbank` subprocess for the session (reset before
each test), the adapter talking to it, a callback receiver, and `harness`: the same contract
driven over the in-process ScriptedChannel and over SimbankChannel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from idempay.channels.scripted import ScriptedChannel
from idempay.channels.simbank import SimbankChannel
from tests.channels.harness import Harness, ScriptedHarness, SimbankHarness
from tests.channels.receiver import Receiver
from tests.simbank_proc import SimbankProcess, running_simbank


@pytest.fixture(scope="session")
def simbank_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimbankProcess]:
    with running_simbank(Path(tmp_path_factory.mktemp("simbank"))) as sim:
        yield sim


@pytest.fixture
def simbank(simbank_server: SimbankProcess) -> SimbankProcess:
    """The session's simulator, reset: empty ledger, nothing pending, default faults."""
    simbank_server.reset()
    return simbank_server


@pytest.fixture
async def adapter(simbank: SimbankProcess) -> AsyncIterator[SimbankChannel]:
    channel = SimbankChannel("simbank", simbank.url, simbank.secret, timeout_s=5.0)
    yield channel
    await channel.aclose()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.aclose()


@pytest.fixture(params=["scripted", "simbank"])
async def harness(
    request: pytest.FixtureRequest, simbank_server: SimbankProcess, receiver: Receiver
) -> AsyncIterator[Harness]:
    if request.param == "scripted":
        yield ScriptedHarness(ScriptedChannel("scripted"))
        return
    simbank_server.reset()
    channel = SimbankChannel("simbank", simbank_server.url, simbank_server.secret, timeout_s=5.0)
    yield SimbankHarness(channel, simbank_server, receiver)
    await channel.aclose()
