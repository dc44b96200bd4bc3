"""Scenario 5, overhead: a payment sent straight to the simulator (`POST /bank/pay` with httpx)
against the same payment through idempay (PostgreSQL, the simulator as its channel), the two
interleaved in every round, at the same concurrency: what idempay adds to a charge's latency."""

from __future__ import annotations

from bench import pg, procs
from bench.context import Context, channel
from bench.figures import Baseline, Figure, Section
from bench.load import run_load
from bench.scenarios.http import Series, spec


def run(ctx: Context) -> Section:
    p = ctx.profile
    section = Section("overhead", "Overhead: the simulator directly vs through idempay")
    direct: dict[int, Series] = {c: Series() for c in p.overhead_concurrency}
    via: dict[int, Series] = {c: Series() for c in p.overhead_concurrency}
    with pg.fresh_db("overhead") as db, channel("simbank", ctx, "overhead") as ch:
        assert ch.simbank is not None
        server = procs.start_server(ctx.folder("overhead"), pg.url(db), ch.channels)
        sim_url = ch.simbank.url
        try:
            run_load(
                {
                    "mode": "direct",
                    "url": sim_url,
                    "concurrency": 8,
                    "duration_s": p.warmup_s,
                    "tag": "warm",
                }
            )
            run_load(spec(server, "first", 8, p.warmup_s, "warm"), server_pid=server.proc.pid)
            for r in range(p.runs):
                for c in p.overhead_concurrency:
                    d = run_load(
                        {
                            "mode": "direct",
                            "url": sim_url,
                            "concurrency": c,
                            "duration_s": p.overhead_s,
                            "tag": f"d{r}c{c}",
                        }
                    )
                    direct[c].add(d)
                    v = run_load(
                        spec(server, "first", c, p.overhead_s, f"v{r}c{c}"),
                        server_pid=server.proc.pid,
                    )
                    via[c].add(v)
                    ctx.say(
                        f"overhead c={c} run {r + 1}: direct p50 {d.p(50):.1f} ms, "
                        f"idempay p50 {v.p(50):.1f} ms"
                    )
        finally:
            server.stop()
    for c in p.overhead_concurrency:
        ds, vs = direct[c], via[c]
        ds.check(section, f"simulator direct c={c}")
        vs.check(section, f"idempay c={c}")
        section.add(
            Figure(
                "overhead",
                f"idempay c={c}",
                "p50",
                "ms",
                vs.p50,
                Baseline(f"simulator direct p50 c={c}", ds.p50),
                note=vs.note(),
            )
        )
        section.add(
            Figure(
                "overhead",
                f"idempay c={c}",
                "p99",
                "ms",
                vs.p99,
                Baseline(f"simulator direct p99 c={c}", ds.p99),
            )
        )
        added = [a - b for a, b in zip(vs.p99, ds.p99, strict=True)]
        section.add(
            Figure(
                "overhead",
                f"added by idempay c={c}",
                "p99 added",
                "ms",
                added,
                Baseline(f"simulator direct p99 c={c}", ds.p99),
                target="<= 5 ms" if c == 8 else "",
            )
        )
        section.add(
            Figure(
                "overhead",
                f"idempay c={c}",
                "rate",
                "payments/s",
                vs.rate,
                Baseline(f"simulator direct c={c}", ds.rate),
            )
        )
    section.notes.append(
        "Both sides go through the same httpx generator; the direct side is one HTTP call to the "
        "simulator, the idempay side is the keyed first charge (auth, idempotency record, two "
        "transactions, the same simulator call, the answer)."
    )
    return section
