"""The machine a run was taken on, kept with its results."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from bench import pg


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _redis_version() -> str:
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "INFO", "server"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("redis_version:"):
            return line.split(":", 1)[1].strip()
    return "unavailable"


def describe() -> dict[str, Any]:
    load = os.getloadavg()
    try:
        pg_version = pg.server_version()
        pg_settings = ", ".join(f"{k}={v}" for k, v in sorted(pg.settings().items()))
    except Exception as e:  # reported, not fatal: the PostgreSQL scenarios will say more
        pg_version, pg_settings = f"unavailable ({type(e).__name__})", ""
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory": _mem_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": pg_version,
        "postgresql settings": pg_settings,
        "sqlite": sqlite3.sqlite_version,
        "redis": _redis_version(),
        "idempay commit": _git("rev-parse", "--short", "HEAD")
        + (" + local changes" if dirty else ""),
        "load average at start": " ".join(f"{x:.2f}" for x in load),
    }
