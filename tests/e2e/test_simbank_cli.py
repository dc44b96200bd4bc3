"""`idempay simbank` from the installed command: it starts, keeps its state in SIMBANK_DATABASE
across restarts, stops cleanly on SIGTERM, and settles after a restart what was still PROCESSING."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from idempay.channels.simbank import SimbankChannel
from idempay.domain.model import OpKind
from idempay.domain.ports import ChannelStatus
from tests.channels.harness import new_op
from tests.simbank_proc import free_port, running_simbank

IDEMPAY = [str(Path(sys.executable).parent / "idempay")]


async def test_the_installed_command_serves_and_keeps_its_ledger_across_restarts(
    tmp_path: Path,
) -> None:
    port = free_port()
    op = new_op()
    with running_simbank(tmp_path, port=port, command=IDEMPAY) as sim:
        channel = SimbankChannel("simbank", sim.url, sim.secret)
        assert (await channel.execute(op)).status is ChannelStatus.SUCCESS
        await channel.aclose()
        assert sim.stop() == 0
    assert (tmp_path / "simbank.db").exists()
    with running_simbank(tmp_path, port=port, command=IDEMPAY) as sim:
        channel = SimbankChannel("simbank", sim.url, sim.secret)
        try:
            assert (await channel.query(OpKind.PAY, op.request_id)).status is ChannelStatus.SUCCESS
            assert (await channel.execute(op)).status is ChannelStatus.SUCCESS
        finally:
            await channel.aclose()
        assert [e["request_id"] for e in sim.ledger()] == [op.request_id]


async def test_an_operation_still_processing_at_shutdown_settles_after_a_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    op = new_op()
    with running_simbank(tmp_path, port=port) as sim:
        sim.faults(async_rate=1, async_settle_ms=600_000)
        channel = SimbankChannel("simbank", sim.url, sim.secret)
        assert (await channel.execute(op)).status is ChannelStatus.PROCESSING
        await channel.aclose()
    with running_simbank(tmp_path, port=port) as sim:
        channel = SimbankChannel("simbank", sim.url, sim.secret)
        try:
            for _ in range(50):
                answer = await channel.query(OpKind.PAY, op.request_id)
                if answer.status is not ChannelStatus.PROCESSING:
                    break
                await asyncio.sleep(0.1)
            assert answer.status is ChannelStatus.SUCCESS
        finally:
            await channel.aclose()
