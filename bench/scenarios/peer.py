"""Scenario 9, a peer: Powertools for AWS Lambda (Python) idempotency on its Redis persistence
layer against idempay, wrapping the same instant channel call, one client in one process:
calls/s for new and for repeated keys, with what each guarantees beside the numbers, and checks
of what each does when a call dies after the channel executed. Runs in a subprocess
(bench/peer_run.py)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from typing import Any

from bench import pg
from bench.context import Context
from bench.figures import Baseline, Figure, Section
from bench.procs import REPO

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
CASES = (
    ("powertools", "Powertools + Redis"),
    ("postgresql", "idempay PostgreSQL"),
    ("sqlite", "idempay SQLite"),
)
KINDS = (("new", "new keys"), ("repeat", "repeated keys"))

GUARANTEE = {
    ("powertools", "new"): (
        "one Redis record per key (SET NX before the function, SET with its answer after); "
        "re-executes when the call dies and the in-progress expiry passes, or when the function "
        "raises; never asks the channel"
    ),
    ("powertools", "repeat"): "the stored answer from Redis (SET NX refused, GET, GET)",
    ("postgresql", "new"): (
        "payment + instruction committed before the channel call; never re-sent; UNKNOWN "
        "resolved by querying the channel; (merchant, biz_no) stops duplicates without a key"
    ),
    ("postgresql", "repeat"): "the stored answer of the Idempotency-Key record in PostgreSQL",
    ("sqlite", "new"): "as PostgreSQL, in one SQLite file",
    ("sqlite", "repeat"): "the stored answer of the Idempotency-Key record in SQLite",
}


def run(ctx: Context) -> Section:
    p = ctx.profile
    section = Section(
        "peer", "Peer: Powertools for AWS Lambda idempotency (Redis) vs idempay, 1 client"
    )
    out_path = ctx.folder("peer") / "peer.json"
    with pg.fresh_db("peer") as db:
        spec = {
            "redis_host": REDIS_HOST,
            "redis_port": REDIS_PORT,
            "prefix": f"idempay-bench-peer-{secrets.token_hex(4)}-",
            "databases": {
                "postgresql": pg.url(db),
                "sqlite": f"sqlite:///{ctx.folder('peer') / 'idempay.db'}",
            },
            "runs": p.runs,
            "new_s": p.peer_new_s,
            "repeat_s": p.peer_repeat_s,
            "warmup_s": p.warmup_s,
            "out": str(out_path),
        }
        ctx.say("peer: Powertools + Redis and idempay (PostgreSQL, SQLite), interleaved")
        done = subprocess.run(
            [sys.executable, "-m", "bench.peer_run", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=600 + 10 * p.runs * (p.peer_new_s + p.peer_repeat_s),
            cwd=REPO,
            check=False,
        )
    if done.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"peer_run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(out_path.read_text())
    _figures(section, out["results"])
    _checks(section, out)
    _notes(section, out)
    return section


def _series(runs: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in runs]


def _figures(section: Section, results: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    for kind, kind_label in KINDS:
        peer = results["powertools"][kind]
        for case, label in CASES:
            runs = results[case][kind]
            is_peer = case == "powertools"
            base_label = f"Powertools, {kind_label}"
            calls = _series(runs, "calls")
            cpu = _series(runs, "cpu_us_per_call")
            channel = sum(int(r["channel_calls"]) for r in runs)
            note = (
                f"{GUARANTEE[case, kind]}. n={int(min(calls))}-{int(max(calls))} per run; "
                f"{min(cpu):,.0f}-{max(cpu):,.0f} us CPU/call in the process; "
                f"channel calls {channel}"
            )
            for metric, unit, key in (
                ("rate", "calls/s", "rate"),
                ("p50", "ms", "p50_ms"),
                ("p99", "ms", "p99_ms"),
            ):
                base = None if is_peer else Baseline(base_label, _series(peer, key))
                section.add(
                    Figure(
                        "peer",
                        f"{label}, {kind_label}",
                        metric,
                        unit,
                        _series(runs, key),
                        base,
                        note=note if metric == "rate" else "",
                    )
                )


def _checks(section: Section, out: dict[str, Any]) -> None:
    results = out["results"]
    for kind, kind_label in KINDS:
        for case, label in CASES:
            runs = results[case][kind]
            channel = [int(r["channel_calls"]) for r in runs]
            bad = sum(int(r["bad"]) for r in runs)
            if kind == "new":
                calls = [int(r["calls"]) for r in runs]
                section.check(
                    f"{label}, {kind_label}: one channel call per call ({channel} for {calls}), "
                    f"every answer a success ({bad} not)",
                    channel == calls and bad == 0,
                )
            else:
                answer = (
                    "the first call's answer"
                    if case == "powertools"
                    else "201 with Idempotent-Replayed: true"
                )
                section.check(
                    f"{label}, {kind_label}: 0 channel calls during repeats ({channel}); "
                    f"every answer {answer} ({bad} not)",
                    not any(channel) and bad == 0,
                )
    pt, ip = out["powertools_demo"], out["idempay_demo"]
    section.check(
        "Powertools, process killed after the channel executed (in-progress expiry 0.3 s): the "
        f"same key at once gets {pt['kill_retry_at_once']}; after the expiry it re-executes "
        f"({pt['kill_retry_after_expiry']}): {pt['kill_executions']} channel executions for one "
        "payment",
        pt["kill_retry_at_once"] == "IdempotencyAlreadyInProgressError"
        and pt["kill_executions_before_expiry"] == 1
        and pt["kill_executions"] == 2,
    )
    section.check(
        "Powertools, channel executed but its answer lost (the function raises): the record is "
        f"deleted, the same key re-executes at once: {pt['lost_executions']} channel executions",
        pt["lost_first"] == "OutcomeUnknown" and pt["lost_executions"] == 2,
    )
    section.check(
        "idempay, process killed after the channel executed: the same key gets "
        f"{ip['kill_retry_at_once']} while in flight, then {ip['kill_retry_after_in_flight']} "
        f"(without the key: {ip['kill_retry_without_key']}); the worker's query finds "
        f"{ip['kill_status_after_query']}: {ip['kill_executions']} channel execution",
        ip["kill_retry_at_once"] == 409
        and ip["kill_status_after_query"] == "SUCCESS"
        and ip["kill_executions"] == 1
        and ip["kill_channel_calls"] == 1,
    )
    section.check(
        f"idempay, channel executed but its answer lost: {ip['lost_first']}, the same key again "
        f"{ip['lost_retry']} without a channel call; the worker's query finds "
        f"{ip['lost_status_after_query']}: {ip['lost_executions']} channel execution",
        ip["lost_status_after_query"] == "SUCCESS"
        and ip["lost_executions"] == 1
        and ip["channel_calls"] == 2,
    )


def _notes(section: Section, out: dict[str, Any]) -> None:
    redis = out["redis"]
    persisted = redis.get("save") or redis.get("appendonly") == "yes"
    pt = out["powertools_demo"]
    section.notes += [
        "One process, one thread, one client; per round Powertools (new keys, then the same "
        "keys again), idempay on PostgreSQL, idempay on SQLite (same); one warm-up round. "
        "Powertools: `@idempotent_function` with `CachePersistenceLayer(host=127.0.0.1, "
        "ssl=False)` (the default ssl=True hangs against a plain Redis), key = the payload's "
        "idempotency key, records kept 24 h, a fresh key prefix per run. idempay: `POST "
        "/v1/payments` through the FastAPI app in-process (httpx ASGITransport, no socket, no "
        "uvicorn), a new biz_no + Idempotency-Key per call, then the same requests again.",
        "The same channel call on both sides: `ScriptedChannel.execute(ChannelOp)` with a new "
        "request id per execution. Powertools' decorator is synchronous, so its function runs "
        "the coroutine to its end in the calling thread (it never suspends: no delay), with no "
        "event loop; idempay awaits it in its event loop.",
        "Powertools guarantees: a record per key in Redis, written INPROGRESS before the function "
        "with an in-progress expiry (the Lambda's remaining time; 15 s here) and COMPLETED with "
        "the answer after it. If the function raises, the record is deleted and the next call "
        "re-executes; if the process dies or runs past the expiry, the next call with that key "
        "RE-EXECUTES the payment (a second charge unless the channel itself dedupes). It has no "
        "notion of asking the channel what happened. The keys live only in Redis: "
        f"this one (Redis {redis.get('version')}, save={redis.get('save')!r}, "
        f"appendonly={redis.get('appendonly')}) "
        + ("persists them." if persisted else "would lose every key on a restart."),
        "idempay guarantees: the payment and its instruction are committed to the database "
        "before the channel call; a sent instruction is never re-sent; an UNKNOWN outcome is "
        "resolved by querying the channel (the worker); duplicates are stopped by (merchant, "
        "biz_no) even without an Idempotency-Key; the key's record and the payment are durable "
        "in the same database.",
        "Payload validation left off on Powertools: with its Redis layer the completed record is "
        "rewritten without the validation hash, so an identical repeat of a completed key gets "
        f"{pt['validate_repeat']} (checked here, {pt['validate_executions']} execution); "
        "Powertools as measured therefore does not refuse a reused key with another payment, "
        "where idempay answers 422.",
        f"{out['redis_keys_removed']} Powertools keys removed from Redis afterwards; measured "
        f"rounds took {out['measured_s']:.0f} s.",
    ]
