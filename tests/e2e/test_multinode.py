"""Three `idempay serve` and two `idempay worker` processes on one PostgreSQL and a private Redis,
against a faulty simulator that charges any resend again: at most one charge per payment whatever
the front lock does (held, expired, down, restarted empty); and RedisFrontLock on that Redis."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import asyncio as aioredis

from idempay import bootstrap
from idempay.channels.scripted import ScriptedChannel
from idempay.clock import SystemClock
from idempay.config import Settings
from idempay.domain.model import PaymentView
from idempay.locks import UNLOCKED, RedisFrontLock
from idempay.services.payments import ChargeCommand, Payments
from idempay.storage.store import SqlStore
from tests import dbs
from tests.e2e.server import Principal, create_principal
from tests.simbank_proc import SimbankProcess, free_port, running_simbank

NODES, WORKERS = 3, 2
OK = {200, 201, 202}  # every answer of POST /v1/payments here; a 5xx or a 409 is a failure
TERMINAL = {"SUCCESS", "FAILED"}
# Short for a test, in the proportions of a deployment: the channel deadline well below the age
# at which a PENDING instruction counts as stale; a short grace for "not found"; fast backoff.
TIMINGS = {
    "IDEMPAY_CHANNEL_TIMEOUT_MS": "400",
    "IDEMPAY_STALE_PENDING_MS": "3000",
    "IDEMPAY_NOT_FOUND_GRACE_MS": "1000",
    "IDEMPAY_RESOLVE_BACKOFF_S": "0.2,0.5,1",
    "IDEMPAY_WORKER_POLL_MS": "100",
    "IDEMPAY_WORKER_LEASE_MS": "5000",
}


def require_redis_server() -> str:
    """The redis-server binary; skip without it (locally) or fail (CI=true), like dbs.require."""
    path = shutil.which("redis-server")
    if path is None:
        message = "redis-server is not installed (the tests start a private one)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


class PrivateRedis:
    """A redis-server of these tests alone (never the machine's shared one on 6379): a free
    port, no persistence, so a restart comes back empty. SIGKILL and start again at will."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        argv = [require_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        log = self.workdir / f"redis-{self.port}.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.ping():
                return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server did not start on {self.port}:\n{log.read_text()}")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None


class Proc:
    """One `idempay serve` or `idempay worker` subprocess, its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], workdir: Path) -> None:
        self.log = workdir / f"{name}.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "idempay.cli", *args],
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Cluster:
    workdir: Path
    database_url: str
    redis: PrivateRedis
    sim: SimbankProcess
    nodes: list[str]  # base URLs of the API nodes
    procs: dict[str, Proc]  # by name

    def env(self, public_url: str, **overrides: str) -> dict[str, str]:
        channels = {"simbank": {"kind": "simbank", "base_url": self.sim.url,
                                "secret": self.sim.secret}}  # fmt: skip
        return {
            "IDEMPAY_DATABASE_URL": self.database_url,
            "IDEMPAY_REDIS_URL": self.redis.url,
            "IDEMPAY_CHANNELS": json.dumps(channels),
            "IDEMPAY_PUBLIC_URL": public_url,  # the simulator's callbacks land on node 0
            "IDEMPAY_LOG_FORMAT": "json",
            **TIMINGS,
            **overrides,
        }

    def serve(self, count: int, name: str, **overrides: str) -> list[str]:
        """Start `count` API nodes at once; their URLs when all answer /healthz."""
        ports = [free_port() for _ in range(count)]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        public = self.nodes[0] if self.nodes else urls[0]
        started = [
            Proc(
                f"{name}-{i}",
                ["serve", "--port", str(p)],
                self.env(public, **overrides),
                self.workdir,
            )
            for i, p in enumerate(ports)
        ]
        self.procs.update((f"{name}-{i}", proc) for i, proc in enumerate(started))
        for url, proc in zip(urls, started, strict=True):
            wait_healthy(url, proc)
        return urls

    def stop(self, *names: str) -> None:
        """Stop the processes named (all of them when none is)."""
        for name in names or tuple(reversed(self.procs)):
            self.procs.pop(name).stop()

    def work(self, count: int) -> None:
        env = self.env(self.nodes[0])
        started = [Proc(f"worker-{i}", ["worker"], env, self.workdir) for i in range(count)]
        self.procs.update((f"worker-{i}", proc) for i, proc in enumerate(started))
        for proc in started:
            wait_logged(proc, "worker.started")


def wait_logged(proc: Proc, event: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.proc.poll() is None:
        if event in proc.log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.log.name}: no {event}:\n{proc.tail()}")


def wait_healthy(url: str, proc: Proc, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.proc.poll() is None:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy:\n{proc.tail()}")


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis: PrivateRedis) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("multinode")
    url, name = dbs.create("postgresql", workdir)
    with ExitStack() as stack:
        stack.callback(dbs.drop, "postgresql", name)
        sim = stack.enter_context(running_simbank(workdir / "simbank"))
        c = Cluster(workdir, url, redis, sim, [], {})
        stack.callback(c.stop)
        c.nodes = c.serve(NODES, "serve")
        c.work(WORKERS)
        yield c


@pytest.fixture
async def merchant(cluster: Cluster) -> Principal:
    return await create_principal(cluster.database_url, "acme")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # A connection per request: reusing one that the server is closing as idle fails with a
    # ReadError, and on a starved CPU the client cannot tell in time.
    limits = httpx.Limits(max_connections=48, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        yield c


# --- clients and checks ---------------------------------------------------------------------


def charge_body(biz_no: str) -> dict[str, Any]:
    return {"biz_no": biz_no, "order_no": f"O-{biz_no}", "amount": 1999, "currency": "CNY",
            "channel": "simbank"}  # fmt: skip


@dataclass
class Answers:
    """Every answer to POST /v1/payments, by biz_no."""

    by_biz_no: defaultdict[str, list[httpx.Response]]

    def statuses(self) -> Counter[int]:
        return Counter(r.status_code for rs in self.by_biz_no.values() for r in rs)

    def check_one_creation_each(self) -> None:
        """Every answer 200/201/202, one payment id per biz_no, exactly one answer not a replay
        (the request that did the work); every other answer says Idempotent-Replayed."""
        assert set(self.statuses()) <= OK, self.statuses()
        for biz_no, answers in self.by_biz_no.items():
            assert len({r.json()["id"] for r in answers}) == 1, biz_no
            fresh = [r for r in answers if r.headers.get("Idempotent-Replayed") != "true"]
            assert len(fresh) == 1, (biz_no, [r.status_code for r in answers])


async def duplicates(
    client: httpx.AsyncClient, nodes: list[str], merchant: Principal, biz_no: str, n: int, k: int,
    answers: Answers,
) -> None:  # fmt: skip
    """`n` concurrent requests for `biz_no`, round-robin over the nodes from node `k`."""
    urls = [nodes[(k + j) % len(nodes)] for j in range(n)]
    answers.by_biz_no[biz_no] += await asyncio.gather(*(
        client.post(f"{u}/v1/payments", json=charge_body(biz_no), headers=merchant.auth)
        for u in urls
    ))  # fmt: skip


async def settle(
    client: httpx.AsyncClient, nodes: list[str], merchant: Principal, biz_nos: list[str],
    timeout_s: float = 40.0,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Poll until every payment is SUCCESS or FAILED (the workers resolve the rest)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await asyncio.gather(*(
            client.get(f"{nodes[i % len(nodes)]}/v1/payments/{b}", headers=merchant.auth)
            for i, b in enumerate(biz_nos)
        ))  # fmt: skip
        payments = {b: r.json() for b, r in zip(biz_nos, got, strict=True)}
        open_ = {b: p["status"] for b, p in payments.items() if p["status"] not in TERMINAL}
        if not open_:
            return payments
        assert time.monotonic() < deadline, f"still open after {timeout_s} s: {open_}"
        await asyncio.sleep(0.3)


def check_against_ledger(sim: SimbankProcess, payments: dict[str, dict[str, Any]]) -> Counter[str]:
    """The simulator's ledger is the truth: at most one PAY execution per payment (it does not
    deduplicate, so a resend would show), and idempay's status is what the ledger says."""
    pays = [e for e in sim.ledger() if e["kind"] == "PAY"]
    executed = Counter(e["payment_ref"] for e in pays)
    charged = Counter(e["payment_ref"] for e in pays if e["status"] == "SUCCESS")
    for biz_no, p in payments.items():
        assert executed[p["id"]] <= 1, (biz_no, [e for e in pays if e["payment_ref"] == p["id"]])
        assert p["status"] == ("SUCCESS" if charged[p["id"]] else "FAILED"), (biz_no, p)
    return Counter(p["status"] for p in payments.values())


async def scrape(client: httpx.AsyncClient, nodes: list[str]) -> defaultdict[str, float]:
    """Every node's /metrics summed: 'name{label=value}' -> value (counters without _total)."""
    total: defaultdict[str, float] = defaultdict(float)
    for text in [(await client.get(f"{u}/metrics")).text for u in nodes]:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                total[f"{s.name.removesuffix('_total')}{{{labels}}}"] += s.value
    return total


DEGRADED = "idempay_front_lock_degraded{}"
ACQUIRED = "idempay_front_lock_acquisitions{result=acquired}"
BUSY = "idempay_front_lock_acquisitions{result=busy}"
BY_LOCK = "idempay_duplicates_stopped{layer=front_lock}"
BY_BIZ_NO = "idempay_duplicates_stopped{layer=biz_no}"


# --- many nodes, many workers, a faulty channel ------------------------------------------------


async def test_retries_spread_over_three_nodes_charge_each_payment_at_most_once(
    cluster: Cluster, merchant: Principal, client: httpx.AsyncClient
) -> None:
    sim, nodes = cluster.sim, cluster.nodes
    sim.faults(drop_response_rate=0.15, timeout_rate=0.15, timeout_hold_ms=1000, error_rate=0.15,
               callback_duplicate_rate=0.3, idempotency=False, seed=8)  # fmt: skip
    before = await scrape(client, nodes)
    biz_nos = [f"MN-{i:03d}" for i in range(60)]
    answers = Answers(defaultdict(list))
    gate = asyncio.Semaphore(10)  # 40 requests at once: within PostgreSQL's 100 connections

    async def client_of(i: int, biz_no: str) -> None:
        async with gate:
            await duplicates(client, nodes, merchant, biz_no, 4, i, answers)  # a burst
            await asyncio.sleep(0.05)
            await duplicates(client, nodes, merchant, biz_no, 2, i + 1, answers)  # retries

    await asyncio.gather(*(client_of(i, b) for i, b in enumerate(biz_nos)))
    answers.check_one_creation_each()
    sim.faults(idempotency=False)  # healed; a resend would still charge twice
    payments = await settle(client, nodes, merchant, biz_nos)
    outcome = check_against_ledger(sim, payments)
    assert outcome["SUCCESS"] > 0 and outcome["FAILED"] > 0, outcome  # both kinds were resolved
    after = await scrape(client, nodes)
    replays = sum(len(rs) - 1 for rs in answers.by_biz_no.values())
    assert after[BY_LOCK] + after[BY_BIZ_NO] - before[BY_LOCK] - before[BY_BIZ_NO] == replays
    assert after[ACQUIRED] > before[ACQUIRED]
    # the lock stopped concurrent duplicates across nodes; each of them had found it busy
    assert after[BUSY] - before[BUSY] >= after[BY_LOCK] - before[BY_LOCK] > 0


# --- Redis killed mid-storm, then back empty ---------------------------------------------------


async def test_redis_killed_mid_storm_and_restarted_empty_causes_no_double_charge_and_no_error(
    cluster: Cluster, merchant: Principal, client: httpx.AsyncClient
) -> None:
    sim, nodes, redis = cluster.sim, cluster.nodes, cluster.redis
    sim.faults(latency_ms=100, idempotency=False)  # calls in flight when Redis goes
    answers = Answers(defaultdict(list))
    stop = asyncio.Event()

    async def storm(lane: int) -> None:
        i = 0
        while not stop.is_set():
            await duplicates(client, nodes, merchant, f"RK-{lane}-{i}", 4, i, answers)
            i += 1

    async def progress(payments: int) -> None:
        """At least a second and `payments` more answered bursts."""
        start = len(answers.by_biz_no)
        await asyncio.sleep(1.0)
        await until(lambda: len(answers.by_biz_no) - start >= payments, 30.0)

    before = await scrape(client, nodes)
    storms = [asyncio.create_task(storm(lane)) for lane in range(6)]
    await progress(8)
    await asyncio.to_thread(redis.kill)  # SIGKILL while requests hold its locks
    await progress(8)  # every node goes on without the lock
    down = await scrape(client, nodes)
    await asyncio.to_thread(redis.start)  # the same port, empty: the locks taken before are gone
    restarted = await scrape(client, nodes)

    async def lock_used_again() -> bool:
        return (await scrape(client, nodes))[ACQUIRED] > restarted[ACQUIRED]

    await until_async(lock_used_again, 30.0)
    await progress(4)
    stop.set()
    await asyncio.gather(*storms)

    answers.check_one_creation_each()  # no 5xx, no 409: Redis down fails no request
    assert down[DEGRADED] > before[DEGRADED]
    sim.faults(idempotency=False)
    payments = await settle(client, nodes, merchant, sorted(answers.by_biz_no))
    assert check_against_ledger(sim, payments) == {"SUCCESS": len(payments)}


async def until(probe: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        await asyncio.sleep(0.05)


async def until_async(probe: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await probe():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        await asyncio.sleep(0.1)


# --- the lock expires while the first request is still at the channel --------------------------


async def test_a_repeat_after_the_lock_expired_mid_call_is_stopped_by_the_database(
    cluster: Cluster, merchant: Principal, client: httpx.AsyncClient
) -> None:
    slow = cluster.serve(2, "short-ttl", IDEMPAY_LOCK_TTL_MS="200",
                         IDEMPAY_CHANNEL_TIMEOUT_MS="5000",
                         IDEMPAY_REDIS_DEADLINE_MS="1000")  # fmt: skip
    try:
        cluster.sim.faults(latency_ms=2500, idempotency=False)
        first = asyncio.create_task(
            client.post(f"{slow[0]}/v1/payments", json=charge_body("TTL-1"), headers=merchant.auth)
        )
        await expired(cluster.redis.url, f"idempay:lock:pay:{merchant.id}:TTL-1")
        assert not first.done()
        before = await scrape(client, [slow[1]])
        second = await client.post(
            f"{slow[1]}/v1/payments", json=charge_body("TTL-1"), headers=merchant.auth
        )
        after = await scrape(client, [slow[1]])
        assert (second.status_code, second.json()["status"]) == (202, "PROCESSING")  # 1st in flight
        assert second.headers["Idempotent-Replayed"] == "true"
        assert after[BY_BIZ_NO] - before[BY_BIZ_NO] == 1  # stopped by the unique key's row...
        assert after[BY_LOCK] == before[BY_LOCK]  # ...not by the lock, which was gone
        done = await first
        assert (done.status_code, done.json()["status"]) == (201, "SUCCESS")
        assert len(cluster.sim.ledger(payment_ref=done.json()["id"])) == 1
    finally:
        cluster.stop("short-ttl-0", "short-ttl-1")


async def expired(redis_url: str, key: str) -> None:
    """Wait until `key` was taken, then freed by its TTL (nobody releases it in these tests)."""
    r = aioredis.Redis.from_url(redis_url)
    try:
        for present in (True, False):
            deadline = time.monotonic() + 10
            while bool(await r.exists(key)) != present:
                assert time.monotonic() < deadline, f"{key} never {'taken' if present else 'freed'}"
                await asyncio.sleep(0.005)
    finally:
        await r.aclose()


class PausedLookup(SqlStore):
    """A node whose first look for the payment reads 'none yet' and then stalls (GC, a busy
    CPU) until `resume` is set: long enough for another node to insert and its lock to expire."""

    def __init__(self, base: SqlStore) -> None:
        super().__init__(base.engine, base.clock, autocommit=base.autocommit)
        self.looked = asyncio.Event()
        self.resume = asyncio.Event()

    async def find_view(self, merchant_id: str, biz_no: str) -> PaymentView | None:
        found = await super().find_view(merchant_id, biz_no)
        if not self.looked.is_set():
            self.looked.set()
            await self.resume.wait()
        return found


async def test_a_repeat_that_takes_the_expired_lock_is_stopped_by_the_unique_key(
    postgres_url: str, redis: PrivateRedis
) -> None:
    channel = ScriptedChannel("scripted", delay_s=2.0, idempotency=False)
    settings = Settings(database_url=postgres_url, redis_url=redis.url, redis_deadline_ms=1000,
                        lock_ttl_ms=200, channel_timeout_s=5.0)  # fmt: skip
    a = await bootstrap.build(settings, channels={"scripted": channel})
    b = await bootstrap.build(settings, channels={"scripted": channel}, run_migrations=False)
    try:
        merchant, _ = await bootstrap.create_principal(a.store, "acme", operator=False)
        cmd = ChargeCommand("TTL-2", "O-TTL-2", 1999, "CNY", "scripted")
        paused = PausedLookup(b.store)
        node_b = Payments(paused, b.channels, SystemClock(), b.payments.policy, b.lock)
        second = asyncio.create_task(node_b.charge(merchant, cmd))
        await paused.looked.wait()  # B saw no payment yet
        first = asyncio.create_task(a.payments.charge(merchant, cmd))
        await expired(redis.url, f"idempay:lock:pay:{merchant}:TTL-2")  # A inserted, at the bank
        paused.resume.set()
        repeat = await second
        assert (repeat.replayed, repeat.stopped_by) == (True, "biz_no")
        assert repeat.view.payment.status == "PROCESSING"
        assert len(repeat.view.instructions) == 1  # B wrote nothing
        result = await first
        assert result.view.payment.id == repeat.view.payment.id
        assert result.view.payment.status == "SUCCESS"
        assert len(channel.executions()) == 1
        for node in (a, b):  # both took the lock: B passed it, the database stopped B
            assert dict(node.lock.acquisitions) == {"acquired": 1, "busy": 0, "unavailable": 0}
            assert node.lock.degraded == 0
    finally:
        await a.aclose()
        await b.aclose()


# --- RedisFrontLock against a real Redis -------------------------------------------------------


@pytest.fixture
async def lock(redis: PrivateRedis) -> AsyncIterator[RedisFrontLock]:
    front = RedisFrontLock(redis.url, deadline_ms=1000)
    try:
        yield front
    finally:
        await front.aclose()


async def test_releasing_with_an_expired_token_does_not_free_the_new_holders_lock(
    lock: RedisFrontLock,
) -> None:
    key = f"test:cad:{time.time_ns()}"
    late = await lock.acquire(key, 150)
    await asyncio.sleep(0.3)  # its TTL ran out while it was still working
    holder = await lock.acquire(key, 10_000)
    assert late and holder and late != holder
    await lock.release(key, late)  # the late request finishes and releases "its" lock
    await lock.release(key, "not-a-token-of-anyone")
    assert await lock.client.get(key) == holder.encode()
    assert await lock.acquire(key, 10_000) is None
    await lock.release(key, holder)
    assert await lock.client.get(key) is None


async def test_the_ttl_frees_a_lock_that_was_never_released(lock: RedisFrontLock) -> None:
    key = f"test:ttl:{time.time_ns()}"
    assert await lock.acquire(key, 400)
    assert await lock.acquire(key, 400) is None
    await asyncio.sleep(0.6)
    assert await lock.acquire(key, 400)
    assert dict(lock.acquisitions) == {"acquired": 2, "busy": 1, "unavailable": 0}


async def test_an_unreachable_redis_answers_unlocked_within_the_deadline() -> None:
    front = RedisFrontLock(f"redis://127.0.0.1:{free_port()}/0", deadline_ms=200)  # closed port
    try:
        t0 = time.perf_counter()
        token = await front.acquire("test:closed", 10_000)
        elapsed = time.perf_counter() - t0
        await front.release("test:closed", "some-token")
    finally:
        await front.aclose()
    assert token == UNLOCKED and elapsed < front.deadline_s + 0.1  # no retries, no backoff
    assert front.degraded == 2 and front.acquisitions["unavailable"] == 1


async def test_a_redis_that_does_not_answer_costs_no_more_than_the_deadline() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        front = RedisFrontLock(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", deadline_ms=100)
        try:
            t0 = time.perf_counter()
            token = await front.acquire("test:silent", 10_000)
            elapsed = time.perf_counter() - t0
        finally:
            await front.aclose()
    assert token == UNLOCKED and 0.09 <= elapsed < 0.4
    assert front.degraded == 1


async def test_a_redis_restarted_empty_is_used_again_at_once(
    lock: RedisFrontLock, redis: PrivateRedis
) -> None:
    key = f"test:restart:{time.time_ns()}"
    assert await lock.acquire(key, 10_000)
    redis.kill()
    assert await lock.acquire(key, 10_000) == UNLOCKED  # down: go on without the lock
    redis.start()
    token = await lock.acquire(key, 10_000)  # empty: the old holder's lock is gone
    assert token
    await lock.release(key, token)  # the release script is loaded again (NOSCRIPT)
    assert await lock.client.get(key) is None
    assert lock.degraded == 1
