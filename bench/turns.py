"""agentd's in-process cost per turn, next to a raw-aiosqlite baseline measured in the same run.

    python bench/turns.py            # full run, 5 reps (~3-4 min on 2 cores)
    python bench/turns.py --quick    # smoke run, 1 rep (~20-60 s)
    python bench/turns.py --profile 10000   # cProfile of agentd turns at L=10000, then exit
    python bench/turns.py --postgres --parts seq   # adds agentd turns on PostgreSQL to the sequential table

Prints markdown tables on stdout (progress on stderr) and writes the raw numbers
to bench/results/turns-<timestamp>.json. What each row means: bench/README.md.

The zero-latency model: the agent keeps the default `offline` model and the
benchmark hands the one constructor (`Resources`) a `ZeroModel` under that
provider name, as tests pass their fakes. The real offline model is measured
as a second row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import math
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import httpx
import pg_turn  # (bench/: the benchmark scripts' folder is on the path)
import uvicorn
from _common import (  # bench/_common.py: first, it puts the repository root on the path
    free_port,
    log,
    pct,
    wait_until,
    write_results,
)
from fastapi import FastAPI, Request

from agentd.config.http_store import StoreSpec
from agentd.config.loader import parse_agent
from agentd.config.models import AgentSpec, DaemonSpec
from agentd.daemon import Daemon, EmbeddedServer, Resources
from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from agentd.messages import Message, dump_message
from agentd.providers.base import Completion, CompletionRequest, Usage
from agentd.store.base import Store
from agentd.store.queries import MessageCounts, RunTotals
from agentd.store.records import RunRecord, StoredMessage
from agentd.store.writes import CommitTurn
from testkit.postgres import PostgresServer

WARM = 3  # untimed turns before each sequential cell
AGENT_YAML = "memory: {scope: thread, compact_at_tokens: false}\n"
WORDS = (
    "agent run tool call memory thread audit event model token stream result context window budget "
    "plan step reply user assistant message store index commit journal page cache latency daemon"
).split()


def text(rng: random.Random, n: int = 400) -> str:
    """~n chars of distinct pseudo-random words (as the peer benchmarks use)."""
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


ZERO_REPLY = text(random.Random(7))


class ZeroModel:
    """Answers instantly with a fixed ~400-char reply and reports usage (so nothing is estimated)."""

    name = "offline"

    async def complete(self, request: CompletionRequest) -> Completion:
        return Completion(Message.assistant(ZERO_REPLY), usage=Usage(1000, 100), stop_reason="stop")


# -- statistics ------------------------------------------------------------------------------


def lat(ns: list[int]) -> dict[str, Any]:
    us = [x / 1000.0 for x in ns]
    return {"n": len(us), "p50_us": round(pct(us, 50), 1), "p95_us": round(pct(us, 95), 1)}


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def fmt_us(us: float) -> str:
    if us != us:
        return "–"
    return f"{us:.0f} µs" if us < 1000 else f"{us / 1000:.2f} ms"


def after_setup(args: argparse.Namespace) -> None:
    gc.collect()
    if args.gc_freeze:
        gc.freeze()


def end_cell(args: argparse.Namespace) -> None:
    if args.gc_freeze:
        gc.unfreeze()  # let the next cell's garbage collector see (and free) this cell's objects


# -- agentd side -----------------------------------------------------------------------------


def bench_spec(name: str) -> AgentSpec:
    return parse_agent(Path(f"{name}.yaml"), text=AGENT_YAML)


def resources(model: str, root: Path, store_url: str | None = None) -> Resources:
    """The one constructor of agents, with the zero-latency model in place of `offline` (see the docstring);
    with `store_url`, every agent in that PostgreSQL database instead of SQLite files under `root`."""
    settings = DaemonSpec(store=StoreSpec(url=store_url))
    return Resources(settings, root, providers={"offline": ZeroModel()} if model == "zero" else {})


# The throwaway PostgreSQL server of a --postgres run: started once in the main thread (it must outlive
# the server; testkit/postgres.py), with PostgreSQL's default settings (fsync and synchronous
# commit on, as performance.md's pgbench figures); each cell gets a database of its own.
POSTGRES: PostgresServer | None = None


def seed_messages(rng: random.Random, n: int) -> list[StoredMessage]:
    return [
        StoredMessage(i + 1, Message.user(text(rng)) if i % 2 == 0 else Message.assistant(text(rng)))
        for i in range(n)
    ]


async def prefill_agentd(store: Store, keys: list[str], seed: list[StoredMessage]) -> None:
    """Each conversation starts with L stored messages, written through the store seam (one batch)."""
    now = time.time()
    await store.write(
        *(
            CommitTurn(
                key, None, seed, RunRecord(f"prefill-{key}", key, "prefill", None, "ok", now), None, None, now
            )
            for key in keys
        )
    )


async def check_agentd(store: Store, keys: list[str], L: int, turns: int) -> None:
    """The benchmark measured what it claims: every turn stored 2 messages and 1 message run."""
    found = await store.read_many(*(MessageCounts(k) for k in keys), *(RunTotals(k) for k in keys))
    msgs = sum(c["messages"] for c in found[: len(keys)])
    runs = sum(t.get("message", {}).get("runs", 0) for t in found[len(keys) :])
    want = len(keys) * L + 2 * turns
    if (msgs, runs) != (want, turns):
        raise AssertionError(f"expected {want} messages and {turns} runs, found {msgs} and {runs}")


class AgentdSeq:
    """One sequential cell through Agent.handle (on SQLite files, or on PostgreSQL with `store_url`)."""

    def __init__(self, model: str, root: Path, store_url: str | None = None):
        self.model, self.root, self.store_url = model, root, store_url

    async def setup(self, keys: list[str], seed: list[StoredMessage]) -> list[int]:
        self.resources = await resources(self.model, self.root, self.store_url).__aenter__()
        self.runtime = await self.resources.open_agent(bench_spec("bench"))
        self.store = self.runtime.state.store
        await prefill_agentd(self.store, keys, seed)
        # The first message of a conversation not in memory loads its thread; that happens once
        # per conversation, so it is timed here on its own and the turns below are hot.
        loads = []
        for key in keys:
            t0 = time.perf_counter_ns()
            await self.runtime.state.threads.get(key)
            loads.append(time.perf_counter_ns() - t0)
        self.keys = keys
        return loads

    async def turn(self, key: str, user: str) -> int:
        reply = await self.runtime.handle(InboundEvent("bench", key, user, "webhook"))
        if reply.error is not None or (self.model == "zero" and reply.text != ZERO_REPLY):
            raise AssertionError(f"unexpected reply {reply}")
        thread = self.runtime.state.threads.peek(key)
        assert thread is not None
        return len(thread.messages) - 2

    async def close(self, L: int, turns: int) -> None:
        await check_agentd(self.store, self.keys, L, turns)
        await self.runtime.close()
        await self.resources.__aexit__(None, None, None)


# -- the raw baseline ------------------------------------------------------------------------

BASE_SCHEMA = """CREATE TABLE IF NOT EXISTS messages(id INTEGER PRIMARY KEY, thread_id TEXT NOT NULL,
  seq INTEGER NOT NULL, role TEXT NOT NULL, body TEXT NOT NULL, ts REAL NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS messages_thread_seq ON messages(thread_id, seq);"""
BASE_LOAD = "SELECT seq, body FROM messages WHERE thread_id=? ORDER BY seq"
BASE_INSERT = "INSERT INTO messages(thread_id, seq, role, body, ts) VALUES (?,?,?,?,?)"


def base_rows(key: str, seq: int, bodies: Sequence[tuple[str, str]]) -> list[tuple[Any, ...]]:
    now = time.time()
    return [(key, seq + i, role, body, now) for i, (role, body) in enumerate(bodies)]


def base_prefill(path: Path, keys: list[str], seed: list[StoredMessage]) -> None:
    """Same message bodies as agentd stores (its JSON), written with plain sqlite3."""
    bodies = [(m.message.role, dump_message(m.message)) for m in seed]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(BASE_SCHEMA)
    conn.execute("BEGIN")
    for key in keys:
        conn.executemany(BASE_INSERT, base_rows(key, 1, bodies))
    conn.execute("COMMIT")
    conn.close()


class BaseAio:
    """The minimum per turn on aiosqlite (performance.md's "base on aiosqlite"): load the whole
    thread (SELECT + json.loads of every row) on a reader connection, then insert user+assistant
    in one BEGIN IMMEDIATE..COMMIT on a writer connection under an asyncio.Lock. WAL, NORMAL."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = asyncio.Lock()

    async def open(self) -> None:
        self.w = await aiosqlite.connect(self.path, isolation_level=None)
        await self.w.execute("PRAGMA journal_mode=WAL")
        await self.w.execute("PRAGMA synchronous=NORMAL")
        await self.w.executescript(BASE_SCHEMA)
        self.r = await aiosqlite.connect(self.path, isolation_level=None)

    async def turn(self, key: str, user: str) -> int:
        rows = list(await self.r.execute_fetchall(BASE_LOAD, (key,)))
        history = [json.loads(body) for _, body in rows]
        seq = rows[-1][0] + 1 if rows else 1
        bodies = [("user", dump_message(Message.user(user))), ("assistant", ZERO_BODY)]
        async with self.lock:
            await self.w.execute("BEGIN IMMEDIATE")
            try:
                await self.w.executemany(BASE_INSERT, base_rows(key, seq, bodies))
                await self.w.execute("COMMIT")
            except BaseException:
                await self.w.execute("ROLLBACK")
                raise
        return len(history)

    async def close(self) -> None:
        await self.r.close()
        await self.w.close()


ZERO_BODY = dump_message(Message.assistant(ZERO_REPLY))


class BaseSync:
    """The same turn with plain sqlite3 on the event loop's thread: no hop at all (a floor)."""

    def __init__(self, path: Path):
        self.c = sqlite3.connect(path, isolation_level=None)
        self.c.execute("PRAGMA journal_mode=WAL")
        self.c.execute("PRAGMA synchronous=NORMAL")

    async def turn(self, key: str, user: str) -> int:
        rows = self.c.execute(BASE_LOAD, (key,)).fetchall()
        history = [json.loads(body) for _, body in rows]
        bodies = [("user", dump_message(Message.user(user))), ("assistant", ZERO_BODY)]
        self.c.execute("BEGIN IMMEDIATE")
        self.c.executemany(BASE_INSERT, base_rows(key, rows[-1][0] + 1, bodies))
        self.c.execute("COMMIT")
        return len(history)

    async def close(self) -> None:
        self.c.close()


def check_base(path: Path, keys: list[str], L: int, turns: int) -> None:
    conn = sqlite3.connect(path)
    marks = ",".join("?" * len(keys))
    n = conn.execute(f"SELECT COUNT(*) FROM messages WHERE thread_id IN ({marks})", keys).fetchone()[0]
    conn.close()
    if n != len(keys) * L + 2 * turns:
        raise AssertionError(f"baseline: expected {len(keys) * L + 2 * turns} messages, found {n}")


class BaseSeq:
    def __init__(self, kind: str, root: Path):
        self.kind, self.path = kind, root / f"{kind}.db"

    async def setup(self, keys: list[str], seed: list[StoredMessage]) -> list[int]:
        base_prefill(self.path, keys, seed)
        if self.kind == "base-aio":
            aio = BaseAio(self.path)
            await aio.open()
            self.impl: BaseAio | BaseSync = aio
        else:
            self.impl = BaseSync(self.path)
        self.keys = keys
        return []

    async def turn(self, key: str, user: str) -> int:
        return await self.impl.turn(key, user)

    async def close(self, L: int, turns: int) -> None:
        await self.impl.close()
        check_base(self.path, self.keys, L, turns)


class BasePgSeq:
    """The least a PostgreSQL turn can cost, measured in the same run: bench/pg_turn.py's turn (fence
    check, version read, 2 messages, a run, a version bump: one transaction, 2 round trips pipelined)
    on psycopg sync, one thread hop, with no claim to take or give back and no engine around it."""

    async def setup(self, keys: list[str], seed: list[StoredMessage]) -> list[int]:
        assert POSTGRES is not None, "run with --postgres"
        self.database = f"base_pg_{random.randrange(1 << 30)}"
        url = POSTGRES.create_database(self.database)
        n, L = len(keys), len(seed)
        POSTGRES.psql(pg_turn.SCHEMA, self.database)
        POSTGRES.psql(
            f"INSERT INTO threads (id, conversation_key) SELECT i, 'c' || i FROM generate_series(1, {n}) i;"
            "INSERT INTO conversation_leases (thread_id, holder, fence, expires_at)"
            " SELECT id, 'bench', 1, now() + interval '1 day' FROM threads;"
            "INSERT INTO messages (thread_id, seq, role, body) SELECT t, s, 'user', '{}'::jsonb"
            f" FROM generate_series(1, {n}) t, generate_series(1, {L}) s; ANALYZE;",
            self.database,
        )
        rng = random.Random(3)
        self.threaded = pg_turn.ThreadedPsycopg(url, 1, pipeline=True)
        self.do = self.threaded.turn(pg_turn.body(rng, "user"), pg_turn.body(rng, "assistant"))
        self.conversations = {k: pg_turn.Conversation(i + 1, next_seq=L + 1) for i, k in enumerate(keys)}
        return []

    async def turn(self, key: str, user: str) -> int:
        conversation = self.conversations[key]
        await self.do(conversation)
        return conversation.next_seq - 3

    async def close(self, L: int, turns: int) -> None:
        self.threaded.close()
        assert POSTGRES is not None
        out = POSTGRES.psql("SELECT count(*) FROM messages", self.database)
        if int(out) != len(self.conversations) * L + 2 * turns:
            raise AssertionError(
                f"base-pg: expected {len(self.conversations) * L + 2 * turns} messages, found {out}"
            )
        POSTGRES.drop_database(self.database)


# -- 1. sequential per-turn latency ----------------------------------------------------------

SEQ_ROWS = {
    "agentd-zero": "agentd turn, zero-latency model",
    "agentd-pg": "agentd turn on PostgreSQL (same machine, default settings), zero-latency model",
    "base-pg": "PostgreSQL floor: bench/pg_turn.py's one-transaction turn, psycopg pipelined, no claim",
    "agentd-offline": "agentd turn, built-in offline model",
    "base-aio": "baseline: raw aiosqlite, full reload + 2 inserts + commit",
    "base-sync": "floor: same on plain sqlite3, on the loop thread",
}


async def seq_cell(kind: str, L: int, args: argparse.Namespace, rng: random.Random):
    per = max(1, L // 20)  # turns per thread: the thread grows at most 10 % while measured
    nthreads = math.ceil((args.n + WARM) / per)
    keys = [f"webhook:L{L}-t{i}" for i in range(nthreads)]
    seed = seed_messages(rng, L)
    users = [text(rng) for _ in range(args.n + WARM)]
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    cell: AgentdSeq | BaseSeq | BasePgSeq
    database = None
    if kind == "agentd-pg":
        assert POSTGRES is not None, "run with --postgres"
        database = f"turns_{L}_{random.randrange(1 << 30)}"
        cell = AgentdSeq("zero", root, POSTGRES.create_database(database))
    elif kind.startswith("agentd"):
        cell = AgentdSeq(kind.removeprefix("agentd-"), root)
    elif kind == "base-pg":
        cell = BasePgSeq()
    else:
        cell = BaseSeq(kind, root)
    try:
        loads = await cell.setup(keys, seed)
        after_setup(args)
        samples: list[int] = []
        seen: list[int] = []
        started = time.perf_counter()
        done = 0
        for i, user in enumerate(users):
            t0 = time.perf_counter_ns()
            h = await cell.turn(keys[i // per], user)
            dt = time.perf_counter_ns() - t0
            done += 1
            if i >= WARM:
                samples.append(dt)
                seen.append(h)
                if len(samples) >= args.min_n and time.perf_counter() - started > args.budget:
                    break
        end_cell(args)
        await cell.close(L, done)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if database is not None and POSTGRES is not None:
            POSTGRES.drop_database(database)
    r = lat(samples)
    r["hist_len_min"], r["hist_len_max"] = min(seen), max(seen)
    if loads:
        r["cold_load"] = lat(loads)
    return r


# -- 2. 100 concurrent conversations ---------------------------------------------------------


async def conc_agentd(
    layout: str,
    args: argparse.Namespace,
    rng: random.Random,
    store_url: str | None = None,
    meter: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
):
    """`store_url`: every agent in that PostgreSQL database instead; `meter`: see conc_run
    (both for bench/replicas.py)."""
    C, L = args.convs, args.conc_length
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    seed = seed_messages(rng, L)
    keys = [f"webhook:conv{i}" for i in range(C)]
    runtimes: list[Agent] = []
    shared = await resources("zero", root, store_url).__aenter__()  # one store thread for every file
    try:
        if layout == "one-file":
            rt = await shared.open_agent(bench_spec("bench"))
            await prefill_agentd(rt.state.store, keys, seed)
            runtimes, per_conv = [rt], [rt] * C
        else:
            for i in range(C):
                rt = await shared.open_agent(bench_spec(f"bench{i}"))
                await prefill_agentd(rt.state.store, [keys[i]], seed)
                runtimes.append(rt)
            per_conv = runtimes

        async def turn(i: int, user: str) -> None:
            reply = await per_conv[i].handle(InboundEvent(per_conv[i].name, keys[i], user, "webhook"))
            if reply.text != ZERO_REPLY:
                raise AssertionError(f"unexpected reply {reply}")

        r = await conc_run(turn, args, rng, meter)
        for rt in runtimes:
            mine = [k for k, owner in zip(keys, per_conv, strict=True) if owner is rt]
            await check_agentd(rt.state.store, mine, L, len(mine) * (args.conc_turns + 1))
    finally:
        for rt in runtimes:
            await rt.close()
        await shared.__aexit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)
    return r


async def conc_base(layout: str, args: argparse.Namespace, rng: random.Random):
    C, L = args.convs, args.conc_length
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    seed = seed_messages(rng, L)
    keys = [f"conv{i}" for i in range(C)]
    stores: list[BaseAio] = []
    try:
        if layout == "one-file":
            base_prefill(root / "base.db", keys, seed)
            stores = [BaseAio(root / "base.db")]
            per_conv = stores * C
        else:
            for i in range(C):
                base_prefill(root / f"base{i}.db", [keys[i]], seed)
                stores.append(BaseAio(root / f"base{i}.db"))
            per_conv = stores
        for st in stores:
            await st.open()

        async def turn(i: int, user: str) -> None:
            await per_conv[i].turn(keys[i], user)

        r = await conc_run(turn, args, rng)
        for st in stores:
            await st.close()
        stores = []
        for st_keys, path in ([(keys, root / "base.db")] if layout == "one-file" else []) + [
            ([k], root / f"base{i}.db") for i, k in enumerate(keys) if layout == "per-file"
        ]:
            check_base(path, st_keys, L, len(st_keys) * (args.conc_turns + 1))
    finally:
        for st in stores:
            await st.close()
        shutil.rmtree(root, ignore_errors=True)
    return r


async def conc_run(
    turn: Callable[[int, str], Awaitable[None]],
    args: argparse.Namespace,
    rng: random.Random,
    meter: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> dict[str, Any]:
    """`meter`: a context manager around the timed turns (bench/replicas.py reads CPU with it)."""
    C, T = args.convs, args.conc_turns
    users = [[text(rng) for _ in range(T + 1)] for _ in range(C)]
    samples: list[int] = []

    async def conv(i: int, texts: list[str], record: bool) -> None:
        for user in texts:
            t0 = time.perf_counter_ns()
            await turn(i, user)
            if record:
                samples.append(time.perf_counter_ns() - t0)

    # one untimed turn each: agentd loads the thread into memory here, once per conversation
    await asyncio.gather(*(conv(i, users[i][:1], False) for i in range(C)))
    after_setup(args)
    cpu, t0 = time.process_time(), time.perf_counter()
    with meter():
        await asyncio.gather(*(conv(i, users[i][1:], True) for i in range(C)))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu
    end_cell(args)
    r = lat(samples)
    r["tps"] = round(C * T / wall, 1)
    r["cpu_us_per_turn"] = round(1e6 * cpu / (C * T), 1)
    r["wall_s"] = round(wall, 3)
    return r


# -- 3. one webhook turn over HTTP -----------------------------------------------------------


def echo_app() -> FastAPI:
    """The floor: FastAPI + uvicorn reading the same JSON body and answering the same shape."""
    app = FastAPI()

    @app.post("/agents/{agent}/messages")
    async def post_message(agent: str, request: Request) -> dict[str, Any]:
        body = await request.json()
        return {
            "reply": body["text"],
            "run_id": None,
            "conversation_key": "webhook:" + body["conversation_id"],
        }

    return app


async def http_rep(args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    (root / "agents").mkdir()
    (root / "agents" / "hook.yaml").write_text(AGENT_YAML + "channels: {webhook: {}}\n")
    agentd_port, echo_port = free_port(), free_port()
    daemon = Daemon(root / "agents", root / "data", port=agentd_port)
    echo = EmbeddedServer(
        uvicorn.Config(echo_app(), host="127.0.0.1", port=echo_port, log_level="warning", lifespan="off")
    )
    samples: dict[str, list[int]] = {"http-agentd": [], "http-echo": [], "inproc-agentd": []}
    # the daemon prints a "listening" line on stdout; the tables own stdout
    with contextlib.redirect_stdout(io.StringIO()):
        daemon_task = asyncio.create_task(daemon.serve(install_signals=False))
        echo_task = asyncio.create_task(echo.serve())
        try:
            await wait_until(lambda: daemon.agent("hook") is not None and echo.started)
            await wait_until(lambda: daemon.server is not None and daemon.server.started)
            runtime = daemon.agent("hook")
            assert runtime is not None
            async with httpx.AsyncClient(trust_env=False, timeout=30) as client:

                async def via_http(port: int, conv: str, user: str) -> None:
                    r = await client.post(
                        f"http://127.0.0.1:{port}/agents/hook/messages",
                        json={"conversation_id": conv, "text": user},
                    )
                    if r.status_code != 200 or user not in r.json()["reply"]:
                        raise AssertionError(f"bad answer {r.status_code}: {r.text[:200]}")

                async def inproc(user: str) -> None:
                    reply = await runtime.handle(InboundEvent("hook", "webhook:inproc", user, "webhook"))
                    if user not in reply.text:
                        raise AssertionError(f"bad reply {reply}")

                calls: dict[str, Callable[[str], Awaitable[None]]] = {
                    "http-agentd": lambda u: via_http(agentd_port, "c1", u),
                    "http-echo": lambda u: via_http(echo_port, "c1", u),
                    "inproc-agentd": inproc,
                }
                order = list(calls)
                for i in range(args.http_n + 10):
                    rng.shuffle(order)  # interleaved, so drift on a noisy box hits all three alike
                    user = text(rng)
                    for name in order:
                        t0 = time.perf_counter_ns()
                        await calls[name](user)
                        if i >= 10:
                            samples[name].append(time.perf_counter_ns() - t0)
        finally:
            echo.should_exit = True
            daemon.request_stop()
            await asyncio.gather(echo_task, daemon_task)
    shutil.rmtree(root, ignore_errors=True)
    return {name: lat(xs) for name, xs in samples.items()}


# -- the run --------------------------------------------------------------------------------


async def one_rep(rep: int, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(1000 + rep)
    out: dict[str, Any] = {"rep": rep}
    if "seq" in args.parts:
        seq: dict[str, dict[str, Any]] = {k: {} for k in args.seq_rows}
        # every (length, row) cell in a fresh random order, so drift over the rep lands on no row or length
        cells = [(L, kind) for L in args.lengths for kind in args.seq_rows]
        rng.shuffle(cells)
        for L, kind in cells:
            c = seq[kind][str(L)] = await seq_cell(kind, L, args, rng)
            log(
                f"rep{rep} L={L:>5} {kind:<15} p50={c['p50_us']:>9.0f}us p95={c['p95_us']:>9.0f}us n={c['n']}"
            )
        out["seq"] = seq
    if "conc" in args.parts:
        conc: dict[str, dict[str, Any]] = {}
        for layout in args.layouts:
            conc[layout] = {}
            order = ["agentd", "base-aio"]
            rng.shuffle(order)
            for kind in order:
                if kind == "agentd":
                    c = await conc_agentd(layout, args, rng)
                else:
                    c = await conc_base(layout, args, rng)
                conc[layout][kind] = c
                log(f"rep{rep} {layout:<9} {kind:<8} {c['tps']:>7.0f} turns/s p50={c['p50_us']:.0f}us")
        out["conc"] = conc
    if "http" in args.parts:
        out["http"] = h = await http_rep(args, rng)
        log(f"rep{rep} http " + " ".join(f"{k} p50={v['p50_us']:.0f}us" for k, v in h.items()))
    return out


def summarize(data: dict[str, Any]) -> str:
    a, runs, v = data["config"], data["runs"], data["versions"]
    lines = [
        f"## agentd turns benchmark ({data['started']}, Python {v['python']}, SQLite {v['sqlite']}, "
        f"{v['cpus']} CPUs, gc.freeze: {'on' if a['gc_freeze'] else 'off'}, "
        f"reps: {a['reps']}{', quick' if a['quick'] else ''})",
        "",
        "Medians over reps; ratios are taken within each rep, then the median.",
    ]
    if runs and "seq" in runs[0]:
        lines += seq_table(a, runs)
    if runs and "conc" in runs[0]:
        lines += conc_table(a, runs)
    if runs and "http" in runs[0]:
        lines += http_table(a, runs)
    return "\n".join(lines)


def seq_table(a: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    lengths = [str(L) for L in a["lengths"]]
    agentd_rows = [k for k in a["seq_rows"] if k.startswith("agentd")]

    def per_length(kind: str, field: str) -> list[float]:
        return [med([r["seq"][kind][L][field] for r in runs]) for L in lengths]

    def row(label: str, cells: list[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = [
        "",
        f"### 1. Sequential turn, p50 / p95 (≤ {a['n']} timed turns per cell after {WARM} warm-up)",
        "",
        row("row", [f"L={L}" for L in lengths]),
        "|---" * (len(lengths) + 1) + "|",
    ]
    for kind in a["seq_rows"]:
        pairs = zip(per_length(kind, "p50_us"), per_length(kind, "p95_us"), strict=True)
        lines.append(row(SEQ_ROWS[kind], [f"{fmt_us(x)} / {fmt_us(y)}" for x, y in pairs]))
    for kind in agentd_rows:
        loads = [med([r["seq"][kind][L]["cold_load"]["p50_us"] for r in runs]) for L in lengths]
        lines.append(
            row(
                f"{kind}: loading a thread not in memory, p50 (once per conversation)",
                [fmt_us(x) for x in loads],
            )
        )
    if "base-aio" in a["seq_rows"]:
        for kind in agentd_rows:
            for field in ("p50_us", "p95_us"):
                ratios = [
                    med([r["seq"][kind][L][field] / r["seq"]["base-aio"][L][field] for r in runs])
                    for L in lengths
                ]
                lines.append(row(f"ratio {kind} / base-aio, {field[:3]}", [f"{x:.2f}×" for x in ratios]))
    if "agentd-zero" in a["seq_rows"]:
        p50, p95 = per_length("agentd-zero", "p50_us"), per_length("agentd-zero", "p95_us")
        tail = max(y / x for x, y in zip(p50, p95, strict=True))
        lines += [
            "",
            f"agentd-zero: p50 at L={lengths[-1]} / L={lengths[0]} = {p50[-1] / p50[0]:.2f} (G3 ≤ 1.5); "
            f"worst p50 {fmt_us(max(p50))} (G3 target ≤ 0.5 ms); worst p95/p50 = {tail:.2f} (G7 ≤ 1.5).",
        ]
    if "agentd-pg" in a["seq_rows"]:
        p50 = per_length("agentd-pg", "p50_us")
        lines += [
            "",
            f"agentd-pg: p50 at L={lengths[-1]} / L={lengths[0]} = {p50[-1] / p50[0]:.2f}; worst p50 "
            f"{fmt_us(max(p50))} (issue 12 aims at ≤ 1 ms, flat from 10 to 10,000 messages).",
        ]
        if "agentd-zero" in a["seq_rows"]:
            ratios = [
                med([r["seq"]["agentd-pg"][L]["p50_us"] / r["seq"]["agentd-zero"][L]["p50_us"] for r in runs])
                for L in lengths
            ]
            lines.append(row("ratio agentd-pg / agentd-zero (SQLite), p50", [f"{x:.2f}×" for x in ratios]))
        if "base-pg" in a["seq_rows"]:
            ratios = [
                med([r["seq"]["agentd-pg"][L]["p50_us"] / r["seq"]["base-pg"][L]["p50_us"] for r in runs])
                for L in lengths
            ]
            lines.append(row("ratio agentd-pg / base-pg, p50", [f"{x:.2f}×" for x in ratios]))
    return lines


def conc_table(a: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "",
        f"### 2. {a['convs']} concurrent conversations at L={a['conc_length']}, "
        f"{a['conc_turns']} timed turns each (zero-latency model)",
        "",
        "| layout | agentd turns/s | base-aio turns/s | agentd / base-aio | agentd p50 / p95 under load |",
        "|---|---|---|---|---|",
    ]
    for layout in a["layouts"]:
        cells = [r["conc"][layout] for r in runs]
        tps = med([c["agentd"]["tps"] for c in cells])
        base_tps = med([c["base-aio"]["tps"] for c in cells])
        ratio = med([c["agentd"]["tps"] / c["base-aio"]["tps"] for c in cells])
        p50 = med([c["agentd"]["p50_us"] for c in cells])
        p95 = med([c["agentd"]["p95_us"] for c in cells])
        what = "one agent file" if layout == "one-file" else f"{a['convs']} agent files, one store thread"
        lines.append(
            f"| {what} | {tps:,.0f} | {base_tps:,.0f} | {ratio:.2f}× | {fmt_us(p50)} / {fmt_us(p95)} |"
        )
    if set(a["layouts"]) == {"one-file", "per-file"}:
        g5 = med(
            [r["conc"]["per-file"]["agentd"]["tps"] / r["conc"]["one-file"]["agentd"]["tps"] for r in runs]
        )
        lines += ["", f"agentd, {a['convs']} files / one file = {g5:.2f} (G5 ≥ 0.75)."]
    return lines


HTTP_ROWS = {
    "http-agentd": "POST /agents/hook/messages on the in-process daemon (offline model, scope thread)",
    "http-echo": "floor: FastAPI + uvicorn echo of the same request",
    "inproc-agentd": "same agent, `agent.handle()` without HTTP",
}


def http_table(a: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "",
        f"### 3. One webhook turn over HTTP ({a['http_n']} sequential requests, httpx on the same loop)",
        "",
        "| row | p50 | p95 |",
        "|---|---|---|",
    ]
    for key, what in HTTP_ROWS.items():
        p50 = med([r["http"][key]["p50_us"] for r in runs])
        p95 = med([r["http"][key]["p95_us"] for r in runs])
        lines.append(f"| {what} | {fmt_us(p50)} | {fmt_us(p95)} |")
    over = med([r["http"]["http-agentd"]["p50_us"] - r["http"]["http-echo"]["p50_us"] for r in runs])
    lines.append(f"| agentd HTTP p50 minus echo floor p50 | {fmt_us(over)} | |")
    return lines


async def profile(L: int, args: argparse.Namespace) -> None:
    """cProfile of the loop thread during hot agentd turns at length L (the store thread is not seen)."""
    rng = random.Random(5)
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    try:
        cell = AgentdSeq("zero", root)
        turns = max(args.n, 50)
        per = max(1, L // 20)
        keys = [f"webhook:p{i}" for i in range(math.ceil(turns / per))]
        await cell.setup(keys, seed_messages(rng, L))
        after_setup(args)
        users = [text(rng) for _ in range(turns)]
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for i, user in enumerate(users):
            await cell.turn(keys[i // per], user)
        prof.disable()
        log(f"L={L}: {turns} turns, {(time.perf_counter() - t0) / turns * 1e6:.0f} µs/turn under cProfile")
        await cell.close(L, turns)
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(25)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    global POSTGRES
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 rep, L 10 and 1000, fewer samples")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--n", type=int, help="timed turns per sequential cell")
    ap.add_argument("--min-n", type=int, default=10)
    ap.add_argument("--budget", type=float, help="seconds per sequential cell before stopping at >= min-n")
    ap.add_argument(
        "--lengths", type=lambda s: [int(x) for x in s.split(",")], help="(10,100,1000,10000; quick 10,1000)"
    )
    ap.add_argument(
        "--seq-rows", type=lambda s: s.split(","), default=[k for k in SEQ_ROWS if k != "agentd-pg"]
    )
    ap.add_argument("--convs", type=int, default=100)
    ap.add_argument("--conc-length", type=int, default=1000)
    ap.add_argument("--conc-turns", type=int, help="timed turns per conversation")
    ap.add_argument("--layouts", type=lambda s: s.split(","), default=["one-file", "per-file"])
    ap.add_argument("--http-n", type=int, help="sequential requests per HTTP row")
    ap.add_argument("--parts", type=lambda s: s.split(","), default=["seq", "conc", "http"])
    ap.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after each cell's setup")
    ap.add_argument("--dir", default=None, help="where the temporary database files go")
    ap.add_argument("--profile", type=int, metavar="L", help="cProfile agentd turns at length L and exit")
    ap.add_argument(
        "--postgres",
        action="store_true",
        help="add agentd on PostgreSQL (a throwaway server) to the sequential rows",
    )
    a = ap.parse_args()
    a.reps = a.reps or (1 if a.quick else 5)
    a.lengths = a.lengths or ([10, 1000] if a.quick else [10, 100, 1000, 10000])
    a.n = a.n or (20 if a.quick else 60)
    a.budget = a.budget or (1.0 if a.quick else 15.0)
    a.conc_turns = a.conc_turns or (3 if a.quick else 10)
    a.http_n = a.http_n or (50 if a.quick else 300)
    if a.profile is not None:
        asyncio.run(profile(a.profile, a))
        return
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    if a.postgres:
        a.seq_rows += [k for k in ("agentd-pg", "base-pg") if k not in a.seq_rows]
    with contextlib.ExitStack() as stack:
        if any(k.endswith("-pg") for k in a.seq_rows) and "seq" in a.parts:
            POSTGRES = stack.enter_context(PostgresServer(settings={}))
        runs = [asyncio.run(one_rep(rep, a)) for rep in range(a.reps)]
    data: dict[str, Any] = {"kind": "turns", "started": started, "argv": sys.argv[1:]}
    data |= {"config": vars(a), "rows": SEQ_ROWS, "runs": runs}
    path = write_results("turns", data)
    log("wrote", path)
    print(summarize(data))


if __name__ == "__main__":
    main()
