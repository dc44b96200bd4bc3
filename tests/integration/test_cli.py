"""The CLI of API.md: `merchant create` / `operator create` print one JSON object; keys hashed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

from idempay import bootstrap
from idempay.config import Settings
from idempay.storage import tables as t


def idempay(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IDEMPAY_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "idempay.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_merchant_and_operator_create_print_exactly_one_json_object(
    database_url: str,
) -> None:
    m = idempay("merchant", "create", "Acme Ltd", url=database_url)
    o = idempay("operator", "create", "alice", url=database_url)
    assert m.returncode == 0 and o.returncode == 0, m.stderr + o.stderr
    merchant, operator = json.loads(m.stdout), json.loads(o.stdout)
    assert set(merchant) == {"merchant_id", "api_key"} and set(operator) == {
        "operator_id",
        "api_key",
    }
    assert m.stdout.count("\n") == 1
    c = await bootstrap.build(Settings(database_url=database_url), channels={})
    async with c.engine.connect() as conn:
        stored = (await conn.execute(select(t.merchants.c.api_key_hash))).scalar_one()
    assert stored == bootstrap.hash_key(merchant["api_key"]) != merchant["api_key"]
    assert merchant["api_key"] not in m.stderr  # never logged
    principal = await c.store.find_principal(bootstrap.hash_key(operator["api_key"]))
    assert principal is not None and principal.is_operator and principal.name == "alice"
    await c.aclose()


def test_migrate_creates_the_schema_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert idempay("migrate", url=url).returncode == 0
    again = idempay("migrate", url=url)
    assert again.returncode == 0 and "up to date" in again.stderr


def test_a_bad_setting_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "IDEMPAY_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "IDEMPAY_MAX_AMOUNT": "lots",
    }
    r = subprocess.run(
        [sys.executable, "-m", "idempay.cli", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "IDEMPAY_MAX_AMOUNT must be an integer" in r.stderr
    assert "Traceback" not in r.stderr


def test_reconcile_prints_a_summary_and_refuses_a_bad_date(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    env = {
        **os.environ,
        "IDEMPAY_DATABASE_URL": url,
        "IDEMPAY_CHANNELS": '{"bank": {"kind": "scripted"}}',
        "COLUMNS": "200",
    }
    run = [sys.executable, "-m", "idempay.cli", "reconcile", "--channel", "bank"]
    ok = subprocess.run(
        [*run, "--date", "2026-11-29"], env=env, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    assert "bank 2026-11-29 — DONE" in ok.stdout and "DUPLICATE_CHARGE" in ok.stdout
    bad = subprocess.run(
        [*run, "--date", "yesterday"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "YYYY-MM-DD" in bad.stderr
    unknown = subprocess.run(
        [
            sys.executable,
            "-m",
            "idempay.cli",
            "reconcile",
            "--channel",
            "nope",
            "--date",
            "2026-11-29",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 2 and "unknown channel" in unknown.stderr
