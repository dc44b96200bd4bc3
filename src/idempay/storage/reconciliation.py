"""Queries of statement reconciliation: local instructions in bulk, runs, earlier findings."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from idempay.domain.model import Instruction, Payment, new_id
from idempay.domain.states import InstructionStatus
from idempay.storage import tables as t
from idempay.storage.store import SqlStore, insert_ignore, to_instruction, to_payment

CHUNK = 500


def _chunks(ids: Iterable[str]) -> list[list[str]]:
    ids = sorted(set(ids))
    return [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]


class SqlReconciliationStore:
    def __init__(self, store: SqlStore) -> None:
        self.store = store

    async def instructions(self, request_ids: Iterable[str]) -> dict[str, Instruction]:
        c = t.instructions.c
        out: dict[str, Instruction] = {}
        async with self.store.engine.connect() as conn:
            for chunk in _chunks(request_ids):
                for r in (
                    await conn.execute(select(t.instructions).where(c.request_id.in_(chunk)))
                ).all():
                    out[r.request_id] = to_instruction(r)
        return out

    async def payments(self, payment_ids: Iterable[str]) -> dict[str, Payment]:
        c = t.payments.c
        out: dict[str, Payment] = {}
        async with self.store.engine.connect() as conn:
            for chunk in _chunks(payment_ids):
                for r in (await conn.execute(select(t.payments).where(c.id.in_(chunk)))).all():
                    out[r.id] = to_payment(r)
        return out

    async def successes_between(
        self, channel: str, start: datetime, end: datetime
    ) -> list[Instruction]:
        """Local SUCCESS instructions of `channel` written in [start, end): the channel's
        statement of that day should list each of them."""
        c = t.instructions.c
        q = select(t.instructions).where(
            c.channel == channel,
            c.status == InstructionStatus.SUCCESS.value,
            c.created_at >= start,
            c.created_at < end,
        )
        async with self.store.engine.connect() as conn:
            return [to_instruction(r) for r in (await conn.execute(q)).all()]

    async def earlier_findings(
        self, channel: str, request_ids: Iterable[str]
    ) -> dict[str, list[dict[str, Any]]]:
        """Discrepancies earlier runs recorded for these request_ids, by request_id."""
        c = t.discrepancies.c
        out: dict[str, list[dict[str, Any]]] = {}
        async with self.store.engine.connect() as conn:
            for chunk in _chunks(request_ids):
                q = select(t.discrepancies).where(
                    c.source == "reconciliation", c.channel == channel, c.request_id.in_(chunk)
                )
                for r in (await conn.execute(q)).all():
                    out.setdefault(r.request_id, []).append(dict(r._mapping))
        return out

    async def create_run(
        self, channel: str, day: str, schedule_key: str | None = None
    ) -> str | None:
        """A new RUNNING run; None when `schedule_key` was already taken (another worker)."""
        now = self.store.clock.now()
        run_id = new_id("rec", now)
        row = {
            "id": run_id,
            "channel": channel,
            "day": day,
            "status": "RUNNING",
            "schedule_key": schedule_key,
            "counts": "{}",
            "discrepancies": "[]",
            "created_at": now,
        }
        async with self.store.begin() as tx:
            inserted = await insert_ignore(tx.conn, t.reconciliation_runs, row)
        return run_id if inserted else None

    async def finish_run(
        self,
        run_id: str,
        status: str,
        counts: dict[str, int],
        found: list[dict[str, Any]],
        error: str | None = None,
    ) -> None:
        values = {
            "status": status,
            "counts": json.dumps(counts, sort_keys=True),
            "discrepancies": json.dumps(found, sort_keys=True, default=str),
            "error": error,
            "finished_at": self.store.clock.now(),
        }
        async with self.store.begin() as tx:
            await tx.conn.execute(
                update(t.reconciliation_runs)
                .where(t.reconciliation_runs.c.id == run_id)
                .values(**values)
            )

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        q = select(t.reconciliation_runs).where(t.reconciliation_runs.c.id == run_id)
        async with self.store.engine.connect() as conn:
            row = (await conn.execute(q)).first()
        if row is None:
            return None
        run = dict(row._mapping)
        run["counts"] = json.loads(run["counts"])
        run["discrepancies"] = json.loads(run["discrepancies"])
        return run

    async def has_run(self, schedule_key: str) -> bool:
        q = select(t.reconciliation_runs.c.id).where(
            t.reconciliation_runs.c.schedule_key == schedule_key
        )
        async with self.store.engine.connect() as conn:
            return (await conn.execute(q)).first() is not None
