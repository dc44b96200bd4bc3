"""Scenario 4, the duplicate storm: `fanout` (64) clients send the same biz_no at the same moment,
over `keys` biz_nos, against idempay on PostgreSQL without and with the Redis front lock.

Counted from outside, per run: requests/s, latency of the duplicates (answers marked
Idempotent-Replayed), channel executions (the scripted ledger; must equal the number of biz_nos),
how much reached PostgreSQL (pg_stat_database transactions, payment INSERT attempts from
pg_stat_user_tables, failed ones included) and which layer stopped the duplicates (/metrics).
"""

from __future__ import annotations

import re
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from bench import pg, procs
from bench.context import ChannelSetup, Context, channel
from bench.figures import Baseline, Figure, Section
from bench.load import LoadResult, run_load

REDIS_URL = "redis://127.0.0.1:6379/0"
IDLE_FLUSH_S = 10.5
CONFIGS = {"no Redis": {}, "Redis front lock": {"IDEMPAY_REDIS_URL": REDIS_URL}}
_DUP = re.compile(r'^idempay_duplicates_stopped_total\{layer="([^"]+)"\} ([\d.e+]+)$', re.M)


def layers(server: procs.Server) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in _DUP.finditer(server.metrics())}


@dataclass
class Tally:
    rate: list[float] = field(default_factory=list)
    dup_p50: list[float] = field(default_factory=list)
    dup_p99: list[float] = field(default_factory=list)
    db: pg.DbStats | None = None  # PostgreSQL's counters over all measured runs
    keys: int = 0
    calls: list[tuple[int, int]] = field(default_factory=list)  # (channel calls, biz_nos)
    layers: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    errors: int = 0
    first_error: str = ""
    server_us: list[float] = field(default_factory=list)


@dataclass
class Target:
    server: procs.Server
    db: str
    ch: ChannelSetup


def run(ctx: Context) -> Section:
    p = ctx.profile
    section = Section(
        "storm",
        f"Duplicate storm: {p.storm_fanout} clients per biz_no, "
        f"up to {p.storm_keys} biz_nos or {p.storm_s:.0f} s per run (PostgreSQL, instant channel)",
    )
    tallies = {name: Tally() for name in CONFIGS}
    with ExitStack() as stack:
        targets: dict[str, Target] = {}
        for i, (name, extra) in enumerate(CONFIGS.items()):
            db = stack.enter_context(pg.fresh_db(f"storm{i}"))
            ch = stack.enter_context(channel("scripted", ctx, f"storm{i}"))
            server = procs.start_server(ctx.folder(f"storm{i}"), pg.url(db), ch.channels, **extra)
            stack.callback(server.stop)
            targets[name] = Target(server, db, ch)
            _storm(server, p.storm_fanout, 2, 5.0, "warm")
        stats0 = _settled(targets)
        for r in range(p.runs):
            _round(ctx, tallies, targets, f"s{r}")
            for name in targets:
                ctx.say(f"storm {name} run {r + 1}: {tallies[name].rate[-1]:.0f} req/s")
        stats1 = _settled(targets)
    for name, tally in tallies.items():
        tally.db = stats1[name].minus(stats0[name])
    _report(section, tallies)
    return section


def _storm(server: procs.Server, fanout: int, keys: int, seconds: float, tag: str) -> LoadResult:
    spec = {
        "mode": "storm",
        "url": server.url,
        "api_key": server.api_key,
        "tag": tag,
        "fanout": fanout,
        "keys": keys,
        "duration_s": seconds,
        "concurrency": 1,
    }
    return run_load(spec, server_pid=server.proc.pid, processes=1)


def _settled(targets: dict[str, Target]) -> dict[str, pg.DbStats]:
    """PostgreSQL's counters of each database once its backends have published them. A backend
    that flushed less than a second before going idle publishes only 10 s later (PostgreSQL
    15's idle interval): so one wait for all, and the counters are taken over all runs."""
    time.sleep(IDLE_FLUSH_S)
    return {n: pg.settled_stats(t.db, first_wait_s=0) for n, t in targets.items()}


def _round(ctx: Context, tallies: dict[str, Tally], targets: dict[str, Target], tag: str) -> None:
    """One storm per configuration, interleaved."""
    p = ctx.profile
    for name, t in targets.items():
        calls0, layers0 = t.ch.count(), layers(t.server)
        res = _storm(t.server, p.storm_fanout, p.storm_keys, p.storm_s, tag)
        tally = tallies[name]
        tally.rate.append(res.rate)
        tally.dup_p50.append(res.p(50, duplicates=True))
        tally.dup_p99.append(res.p(99, duplicates=True))
        tally.keys += res.keys
        tally.calls.append((t.ch.count() - calls0, res.keys))
        for layer, n in layers(t.server).items():
            tally.layers[layer] = tally.layers.get(layer, 0) + n - layers0.get(layer, 0)
        tally.requests += res.count
        tally.errors += res.errors
        tally.first_error = tally.first_error or res.first_error
        tally.server_us.append(res.server_us_per_request)


def _report(section: Section, tallies: dict[str, Tally]) -> None:
    base_name = "no Redis"
    base = tallies[base_name]
    for name, t in tallies.items():
        is_base = name == base_name
        assert t.db is not None and base.db is not None
        xacts = [(t.db.xact_commit + t.db.xact_rollback) / max(1, t.requests)]
        inserts = [t.db.payment_inserts / max(1, t.keys)]
        base_xacts = [(base.db.xact_commit + base.db.xact_rollback) / max(1, base.requests)]
        base_inserts = [base.db.payment_inserts / max(1, base.keys)]

        def b(values: list[float], what: str, is_base: bool = is_base) -> Baseline | None:
            return None if is_base else Baseline(f"{base_name} {what}", values)

        note = (
            f"{t.requests} requests, {t.errors} errors; server "
            f"{statistics.median(t.server_us):.0f} us CPU/req"
        )
        section.add(
            Figure("storm", name, "rate", "requests/s", t.rate, b(base.rate, "rate"), note=note)
        )
        section.add(Figure("storm", name, "duplicate p50", "ms", t.dup_p50, b(base.dup_p50, "p50")))
        section.add(Figure("storm", name, "duplicate p99", "ms", t.dup_p99, b(base.dup_p99, "p99")))
        section.add(
            Figure(
                "storm",
                name,
                "DB transactions per request",
                "xacts",
                xacts,
                b(base_xacts, "xacts/request"),
                note="over all runs: pg_stat_database commits + rollbacks (a read is a "
                "transaction too) / requests",
            )
        )
        section.add(
            Figure(
                "storm",
                name,
                "payment INSERTs per biz_no",
                "inserts",
                inserts,
                b(base_inserts, "inserts/biz_no"),
                note="over all runs: pg_stat_user_tables.n_tup_ins / biz_nos; 1 = only the winner "
                "reached the INSERT, the rest failed on the unique key (dead tuples)",
            )
        )
        section.check(
            f"{name}: channel calls = biz_nos in every run {[c for c, _ in t.calls]}",
            all(calls == keys for calls, keys in t.calls),
        )
        if t.errors:
            section.notes.append(f"{name}: {t.errors} errors, first: {t.first_error[:200]}")
        stopped = ", ".join(f"{k} {v:.0f}" for k, v in sorted(t.layers.items())) or "none"
        section.notes.append(f"{name}: duplicates stopped by layer (/metrics): {stopped}.")
