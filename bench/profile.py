"""How long and how large each scenario runs: the full profile (default, about 13 minutes on the
2-core reference machine) and --quick (about 2 minutes, small counts)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    name: str
    runs: int  # measured runs per figure (median of these), after one warm-up
    concurrency: tuple[int, ...]
    floor_s: float  # pgbench -T per run
    first_s: float  # first charges: seconds per run
    replay_s: float  # replays: seconds per run
    warmup_s: float
    http_combos: tuple[tuple[str, str], ...]  # (database, channel)
    storm_keys: int  # biz_nos per storm run at most, 64 concurrent requests each
    storm_fanout: int
    storm_s: float  # no new biz_no after this many seconds
    overhead_concurrency: tuple[int, ...]
    overhead_s: float
    growth_points: tuple[int, ...]  # existing payments before measuring
    growth_s: float
    growth_concurrency: int
    recon_lines: int
    worker_instructions: int  # UNKNOWN instructions per worker run
    worker_processes: tuple[int, ...]  # cases: this many `idempay worker` processes
    peer_new_s: float  # peer: seconds of new-key calls per case and run (repeats: peer_repeat_s)
    peer_repeat_s: float

    def with_runs(self, runs: int | None) -> Profile:
        return self if runs is None else replace(self, runs=runs)


ALL_COMBOS = (
    ("postgresql", "scripted"),
    ("postgresql", "simbank"),
    ("sqlite", "scripted"),
    ("sqlite", "simbank"),
)

FULL = Profile(
    name="full",
    runs=3,
    concurrency=(1, 8, 32),
    floor_s=1.5,
    first_s=1.5,
    replay_s=0.6,
    warmup_s=1.0,
    http_combos=ALL_COMBOS,
    storm_keys=40,
    storm_fanout=64,
    storm_s=4.0,
    overhead_concurrency=(1, 8),
    overhead_s=1.5,
    growth_points=(0, 1_000_000),
    growth_s=1.5,
    growth_concurrency=8,
    recon_lines=100_000,
    worker_instructions=10_000,
    worker_processes=(1,),  # (1, 2) adds a case with 2 processes: minutes more
    peer_new_s=2.0,
    peer_repeat_s=1.0,
)

QUICK = Profile(
    name="quick",
    runs=3,
    concurrency=(1, 32),
    floor_s=1,
    first_s=0.6,
    replay_s=0.4,
    warmup_s=0.5,
    http_combos=(("postgresql", "scripted"), ("sqlite", "scripted")),
    storm_keys=4,
    storm_fanout=64,
    storm_s=1.0,
    overhead_concurrency=(8,),
    overhead_s=0.6,
    growth_points=(0, 20_000),
    growth_s=0.6,
    growth_concurrency=8,
    recon_lines=1_000,
    worker_instructions=500,
    worker_processes=(1,),
    peer_new_s=0.5,
    peer_repeat_s=0.3,
)

BIG_GROWTH = (0, 1_000_000, 10_000_000)
