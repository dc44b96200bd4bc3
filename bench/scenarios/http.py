"""Scenarios 2 and 3: first charges and replays through HTTP, against real `idempay serve`
processes on PostgreSQL and on SQLite, with the in-process instant channel and with the simulator.

First charges: `POST /v1/payments` with a new biz_no (and a new Idempotency-Key) per request,
measured against the SQL floor at the same concurrency. Replays: the recorded requests again,
without the key (stopped by biz_no) and with it (stopped by the key's record), measured against
the first charges; the channel's own ledger proves it was not called during replays.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import procs
from bench.context import Context, channel, database
from bench.figures import Baseline, Figure, Section
from bench.load import LoadResult, concat_records, run_load


@dataclass
class Series:
    rate: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    results: list[LoadResult] = field(default_factory=list)

    def add(self, r: LoadResult) -> None:
        self.rate.append(r.rate)
        self.p50.append(r.p(50))
        self.p99.append(r.p(99))
        self.results.append(r)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.results)

    def check(self, section: Section, label: str) -> None:
        """Reported as a check: every answer of every run was 2xx (errors are never timed)."""
        if self.errors:
            first = next(r.first_error for r in self.results if r.first_error)
            section.check(f"{label}: {self.errors} non-2xx answers, first: {first[:160]}", False)

    def note(self) -> str:
        rs = self.results
        srv = statistics.median(r.server_cpu for r in rs)
        us = statistics.median(r.server_us_per_request for r in rs)
        gen = max(r.gen_cpu for r in rs)
        pgc = statistics.median(r.pg_cpu for r in rs)
        others = statistics.median(r.others_cpu for r in rs)
        errors = sum(r.errors for r in rs)
        text = (
            f"n={sum(r.count for r in rs)}; server {srv:.2f} cores, {us:,.0f} us CPU/req; "
            f"pg {pgc:.2f}; gen {gen:.2f} x{rs[0].processes}; other processes {others:.2f} cores"
        )
        if any(r.generator_bound for r in rs):
            text += "; GENERATOR-BOUND"
        if errors:
            text += f"; {errors} errors: {next(r.first_error for r in rs if r.first_error)[:80]}"
        return text


def spec(
    server: procs.Server, mode: str, concurrency: int, seconds: float, tag: str
) -> dict[str, Any]:
    return {
        "mode": mode,
        "url": server.url,
        "api_key": server.api_key,
        "tag": tag,
        "concurrency": concurrency,
        "duration_s": seconds,
        "keyed": True,
    }


def run(ctx: Context, *, replays: bool = True) -> Section:
    title = "First charges and replays through HTTP" if replays else "First charges through HTTP"
    section = Section("replays" if replays else "first_charges", title)
    if not ctx.floor:
        from bench.scenarios import sql_floor

        ctx.say("first charges need the SQL floor of this run: measuring it (writes only)")
        section.notes += sql_floor.run(ctx, variants=("minimal", "writes")).notes[:1]
    for db_kind, channel_kind in ctx.profile.http_combos:
        _combo(ctx, section, db_kind, channel_kind, replays)
    section.notes.append(
        "First charges carry an Idempotency-Key (a careful client's request), so the floor is the "
        "keyed charge's write transactions. The generator runs in separate processes: 'gen' is "
        "the busiest one's CPU (GENERATOR-BOUND when >= 0.85 of a core)."
    )
    return section


def _combo(ctx: Context, section: Section, db_kind: str, ch_kind: str, replays: bool) -> None:
    p, label = ctx.profile, f"{db_kind}+{ch_kind}"
    ctx.say(f"http: {label}")
    folder = ctx.folder(f"http-{db_kind}-{ch_kind}")
    with (
        database(db_kind, ctx, f"http_{db_kind}_{ch_kind}") as (url, _),
        channel(ch_kind, ctx, f"http-{db_kind}-{ch_kind}") as ch,
    ):
        server = procs.start_server(folder, url, ch.channels)
        try:
            idle_rss = procs.peak_rss_mb(server.proc.pid)
            run_load(spec(server, "first", 8, p.warmup_s, "warm"), server_pid=server.proc.pid)
            first = _first_charges(ctx, server, label)
            for c in p.concurrency:
                _first_figures(ctx, section, label, c, first[c])
            section.add(
                Figure(
                    "first_charges",
                    label,
                    "peak RSS of idempay serve",
                    "MiB",
                    [procs.peak_rss_mb(server.proc.pid)],
                    Baseline("RSS after start", [idle_rss]),
                    target="<= 150 MiB",
                )
            )
            if replays:
                _replays(ctx, section, server, ch.count, label, first)
        finally:
            server.stop()


def _first_charges(ctx: Context, server: procs.Server, label: str) -> dict[int, Series]:
    p = ctx.profile
    records = ctx.folder(f"records-{label.replace('+', '-')}")
    out: dict[int, Series] = {c: Series() for c in p.concurrency}
    for r in range(p.runs):
        for c in p.concurrency:
            s = spec(server, "first", c, p.first_s, f"f{r}c{c}")
            res = run_load(s, server_pid=server.proc.pid, records_dir=records)
            out[c].add(res)
            ctx.say(f"  first {label} c={c} run {r + 1}: {res.rate:.0f}/s p99 {res.p(99):.1f} ms")
    return out


def _first_figures(ctx: Context, section: Section, label: str, c: int, s: Series) -> None:
    s.check(section, f"first charges {label} c={c}")
    floor = ctx.floor.get(c)
    lat = ctx.floor_latency.get(c, {})
    section.add(
        Figure(
            "first_charges",
            f"{label} c={c}",
            "rate",
            "payments/s",
            s.rate,
            floor,
            target=">= 0.50 of floor" if c == 32 and label.startswith("postgresql") else "",
            note=s.note(),
        )
    )
    section.add(Figure("first_charges", f"{label} c={c}", "p50", "ms", s.p50, lat.get("p50")))
    section.add(Figure("first_charges", f"{label} c={c}", "p99", "ms", s.p99, lat.get("p99")))


def _replays(
    ctx: Context,
    section: Section,
    server: procs.Server,
    count: Callable[[], int],
    label: str,
    first: dict[int, Series],
) -> None:
    p = ctx.profile
    records = ctx.folder(f"records-{label.replace('+', '-')}")
    everything = records.parent / f"replay-{label.replace('+', '-')}.jsonl"
    n = concat_records(records, everything)
    calls_before = count()
    series: dict[tuple[str, int], Series] = {}
    for r in range(p.runs):
        for c in p.concurrency:
            for how in ("biz_no", "key"):
                s = {
                    **spec(server, "replay", c, p.replay_s, f"r{r}"),
                    "records": str(everything),
                    "with_key": how == "key",
                }
                res = run_load(s, server_pid=server.proc.pid)
                series.setdefault((how, c), Series()).add(res)
                if res.errors:
                    section.check(f"{label} replay by {how} c={c}: {res.errors} errors", False)
                replayed_all = res.replayed == res.ok
                if not replayed_all:
                    section.check(f"{label} replay by {how} c={c}: every answer replayed", False)
    calls = count() - calls_before
    section.check(f"{label}: channel calls during replays = {calls} (must be 0)", calls == 0)
    section.notes.append(f"{label}: {n} recorded first charges replayed; channel calls {calls}.")
    for c in p.concurrency:
        base = Baseline(f"first charges {label} c={c}", first[c].rate)
        base99 = Baseline(f"first charges p99 {label} c={c}", first[c].p99)
        for how in ("biz_no", "key"):
            got = series[(how, c)]
            section.add(
                Figure(
                    "replays",
                    f"{label} by {how} c={c}",
                    "rate",
                    "requests/s",
                    got.rate,
                    base,
                    target=">= 5x first charges",
                    note=got.note(),
                )
            )
            section.add(Figure("replays", f"{label} by {how} c={c}", "p99", "ms", got.p99, base99))
