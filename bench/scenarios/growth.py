"""Scenario 6, growth: first-charge and replay latency with 0, 1M (and with --big 10M) existing
payments on PostgreSQL, each with the rows a real charge leaves (bench/loader.py). One server,
one database that grows between the points; measured at the profile's growth concurrency."""

from __future__ import annotations

from bench import loader, pg, procs
from bench.context import Context, channel
from bench.figures import Baseline, Figure, Section
from bench.load import concat_records, run_load
from bench.scenarios.http import Series, spec


def run(ctx: Context) -> Section:
    p = ctx.profile
    c = p.growth_concurrency
    section = Section("growth", f"Growth: latency with existing payments (PostgreSQL, c={c})")
    first: dict[int, Series] = {}
    replay: dict[int, Series] = {}
    day_scan: dict[int, list[float]] = {}
    with pg.fresh_db("growth") as db, channel("scripted", ctx, "growth") as ch:
        server = procs.start_server(ctx.folder("growth"), pg.url(db), ch.channels)
        try:
            merchant = loader.merchant_of(db)
            loaded = 0
            for point in sorted(p.growth_points):
                if point > loaded:
                    secs = loader.load(db, merchant, loaded, point, ctx.say)
                    rate = (point - loaded) / secs if secs else 0
                    section.notes.append(
                        f"loading payments {loaded:,} -> {point:,} (x8 rows each, VACUUM "
                        f"ANALYZE included) took {secs:.0f} s ({rate:,.0f} payments/s)"
                    )
                    loaded = point
                first[point], replay[point] = _measure(ctx, server, point)
                day_scan[point] = [_day_scan_ms(db) for _ in range(p.runs)]
            size = pg.execute(db, "SELECT pg_size_pretty(pg_database_size(current_database()))")
            section.notes.append(f"database size at the end: {size[0][0]}")
        finally:
            server.stop()
    base_point = min(p.growth_points)
    for point in sorted(p.growth_points):
        label = f"{point:,} existing"
        target = "<= 1.3x" if point != base_point else ""
        for what, series in (("first charge", first), ("replay by biz_no", replay)):
            s, b = series[point], series[base_point]
            s.check(section, f"{what}, {label}")
            section.add(
                Figure(
                    "growth",
                    f"{what}, {label}",
                    "p50",
                    "ms",
                    s.p50,
                    Baseline(f"{what} p50, {base_point:,} existing", b.p50),
                    target=target,
                    note=s.note(),
                )
            )
            section.add(
                Figure(
                    "growth",
                    f"{what}, {label}",
                    "rate",
                    "requests/s",
                    s.rate,
                    Baseline(f"{what} rate, {base_point:,} existing", b.rate),
                )
            )
        section.add(
            Figure(
                "growth",
                f"reconciliation day query, {label}",
                "execution",
                "ms",
                day_scan[point],
                Baseline(f"{base_point:,} existing", day_scan[base_point]),
                note="EXPLAIN ANALYZE of SqlReconciliationStore.successes_between",
            )
        )
    return section


DAY_SCAN = """EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM instructions
    WHERE channel = 'simbank' AND status = 'SUCCESS'
    AND created_at >= date_trunc('day', now() AT TIME ZONE 'UTC')
    AND created_at < date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day'"""


def _day_scan_ms(db: str) -> float:
    """Reconciliation's query for one day's local successes (storage/reconciliation.py)."""
    plan = pg.execute(db, DAY_SCAN)[0][0]
    return float(plan[0]["Execution Time"])


def _measure(ctx: Context, server: procs.Server, point: int) -> tuple[Series, Series]:
    p = ctx.profile
    c = p.growth_concurrency
    records = ctx.folder(f"growth-records-{point}")
    run_load(spec(server, "first", c, p.warmup_s, f"gw{point}"), server_pid=server.proc.pid)
    first, replay = Series(), Series()
    for r in range(p.runs):
        res = run_load(
            spec(server, "first", c, p.growth_s, f"g{point}r{r}"),
            server_pid=server.proc.pid,
            records_dir=records,
        )
        first.add(res)
    everything = records.parent / f"growth-{point}.jsonl"
    concat_records(records, everything)
    for r in range(p.runs):
        s = {**spec(server, "replay", c, p.growth_s, f"gr{r}"), "records": str(everything)}
        replay.add(run_load(s, server_pid=server.proc.pid))
    ctx.say(
        f"growth {point:,}: first p50 {first.p50[-1]:.1f} ms, replay p50 {replay.p50[-1]:.1f} ms"
    )
    return first, replay
