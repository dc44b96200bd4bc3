"""A separate process that charges once (or is killed mid-charge); used by the race and crash tests.

usage: python -m tests.integration.charge_proc URL MERCHANT BIZ_NO LEDGER START_AT
       [--die-after-send]
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.config import Settings
from idempay.domain.ports import ChannelOp
from idempay.services.payments import ChargeCommand


def _die(_op: ChannelOp) -> None:
    """The channel executed; the process dies before transaction B can record the answer."""
    os.kill(os.getpid(), signal.SIGKILL)


async def main(
    url: str, merchant: str, biz_no: str, ledger: str, start_at: float, die: bool
) -> None:
    channel = ScriptedChannel(
        "scripted", delay_s=0.05, ledger_path=Path(ledger), after_execute=_die if die else None
    )
    container = await bootstrap.build(
        Settings(database_url=url),
        channels={"scripted": channel},
        run_migrations=False,
        null_pool=True,
    )
    cmd = ChargeCommand(biz_no, "ORD001", 19900, "CNY", "scripted")
    await asyncio.sleep(max(0.0, start_at - time.time()))
    try:
        result = await container.payments.charge(merchant, cmd)
    finally:
        await container.aclose()
    print(json.dumps({"payment_id": result.view.payment.id, "created": result.created}))


if __name__ == "__main__":
    url, merchant, biz_no, ledger, start_at = sys.argv[1:6]
    asyncio.run(
        main(url, merchant, biz_no, ledger, float(start_at), "--die-after-send" in sys.argv)
    )
