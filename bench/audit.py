"""The audit chain and a person's erasure on large data (issue 11): what they cost, on SQLite and
on PostgreSQL.

    nice python bench/audit.py               # 100,000 events to verify; a 100,000-message agent to erase from
    nice python bench/audit.py --quick       # a tenth of that (~5 s)
    nice python bench/audit.py --postgres    # the same on a throwaway PostgreSQL server too, and two daemons

Three measurements, markdown on stdout (progress on stderr), numbers to bench/results/audit-<ts>.json:

1. **The turn path.** A turn that writes audit rows (here `remember k: v` on the offline model: the
   turn, the memory, and two events — `memory/remember` and `tool/called`) through the agent as the
   daemon runs it, with the chained append (agentd's) and with the plain INSERT it replaced (put back in
   the handler table for the comparison only), alternating in batches of 100. A plain turn writes no
   audit row and pays nothing. Also the CPU of sealing one event (nonces, commitments, digest, link).
2. **Verify.** `verify_store` over a chain of N events of realistic shapes (tool calls with a user, args,
   durations; memory writes), read in pages of 5,000 as `agentd audit verify` does; and the export of
   the same chain checked by docs/verify_audit.py, the auditor's offline verifier (run with python -I).
3. **Erase.** One agent with 2,000 people (a direct conversation of 50 messages each = 100,000
   messages), 20 group conversations of 1,000 messages, 100,000 episodes (256-float vectors, keyword
   index), 10 facts and 2 memories per person, 100,000 audit events; then the export (PersonData) and
   the erasure (ErasePerson: tombstones, deletes, the keyword index, audit fields; on SQLite the FTS
   merge and the WAL truncated) of one person who has a direct conversation, group messages,
   episodes, facts, memories and audit events.

With --postgres, each part runs again in a database of a throwaway server (PostgreSQL's default
settings: fsync and synchronous commit on), and a fourth: **two daemons** serving one agent, each with
4 conversations of `remember` turns at once, so their appends to the one chain wait for its head's
row lock (agentd/store/postgres/audit.py) — turns per second, chained and plain.

The machine is shared: compare the ratios of one run, not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _common import log, write_results  # bench/_common.py: first, it puts the repository root on the path

from agentd.config.http_store import StoreSpec
from agentd.config.loader import parse_agent
from agentd.config.models import DaemonSpec
from agentd.daemon.audit_trail import export_line, verify_store
from agentd.daemon.resources import Resources
from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from agentd.memory.erasure import layer_erasure
from agentd.messages import Message
from agentd.store.audit_chain import link, seal
from agentd.store.base import Store, write_one
from agentd.store.people import subject_of
from agentd.store.postgres.dispatch import HANDLERS as PG_HANDLERS
from agentd.store.queries import AuditTrail, PersonData
from agentd.store.records import AuditRecord, NewEpisode, RunRecord, StoredMessage
from agentd.store.sqlite.dispatch import HANDLERS as SQLITE_HANDLERS
from agentd.store.writes import (
    AppendAudit,
    CommitTurn,
    ErasePerson,
    InsertEpisodes,
    UpsertFact,
    UpsertMemory,
    Write,
)
from testkit.postgres import PostgresServer

VERIFIER = Path(__file__).resolve().parent.parent / "docs" / "verify_audit.py"
DIM = 256
SPEC = parse_agent(Path("bench.yaml"), text="memory: {scope: thread, persistent: true}\n", env={})
MODES = ("chained", "unchained")


# -- where a part runs, and the append it replaced --------------------------------------------------


def unchained_insert(conn: Any, op: AppendAudit) -> None:
    """SQLite's append as it was before the chain (for the comparison only)."""
    conn.executemany(
        "INSERT INTO audit (ts, agent, kind, action, conversation_key, run_id, data, daemon)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (op.ts, op.agent, r.kind, r.action, r.conversation_key, r.run_id, json.dumps(r.data), op.daemon)
            for r in op.records
        ],
    )


def unchained_pg_insert(cx: Any, op: AppendAudit) -> None:
    """PostgreSQL's append as it was before the chain (for the comparison only)."""
    rs = op.records
    cx.run(
        "INSERT INTO audit (agent_id, ts, agent, kind, action, conversation_key, run_id, data, daemon)"
        " SELECT %s, %s, %s, x.kind, x.action, x.conversation_key, x.run_id, x.data, %s"
        " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"
        " WITH ORDINALITY AS x(kind, action, conversation_key, run_id, data, n) ORDER BY x.n",
        (
            cx.agent_id,
            op.ts,
            op.agent,
            op.daemon,
            [r.kind for r in rs],
            [r.action for r in rs],
            [r.conversation_key for r in rs],
            [r.run_id for r in rs],
            [json.dumps(r.data) for r in rs],
        ),
    )


class Backend:
    """Where a part runs: SQLite files under `root`, or a fresh database of the throwaway server."""

    def __init__(self, name: str, root: Path, server: PostgresServer | None = None):
        self.name, self.root, self.server = name, root, server
        self.handlers: dict[type, Any] = PG_HANDLERS if server else SQLITE_HANDLERS
        self.unchained = unchained_pg_insert if server else unchained_insert
        self.url: str | None = None

    def fresh(self, part: str) -> DaemonSpec:
        """Settings for a part: a data folder of its own, and with a server a database of its own."""
        if self.server is not None:
            self.url = self.server.create_database(f"audit_{part}_{random.randrange(1 << 30)}")
        (self.root / part).mkdir(parents=True, exist_ok=True)
        return DaemonSpec(store=StoreSpec(url=self.url))

    @contextlib.asynccontextmanager
    async def store(self, part: str) -> AsyncIterator[Store]:
        async with Resources(self.fresh(part), self.root / part) as resources:
            store = resources.store("bench")
            await store.open()
            try:
                yield store
            finally:
                await store.close()

    def row_counts(self, part: str, tables: tuple[str, ...]) -> dict[str, int]:
        """How many rows each table holds, read raw beside the store (the part's one agent is the only
        one in its file or database): what the report says was stored."""
        if self.url is None:
            conn = sqlite3.connect(self.root / part / "bench.sqlite")
            try:
                return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
            finally:
                conn.close()
        with psycopg.connect(self.url) as pg:
            return {t: _count(pg.execute(f"SELECT count(*) FROM agentd.{t}").fetchone()) for t in tables}  # type: ignore[arg-type]

    def size_mb(self, part: str) -> float:
        if self.url is None:
            return sum(p.stat().st_size for p in (self.root / part).glob("bench.sqlite*")) / 2**20
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) / 2**20 if row else 0.0


STORED_TABLES = ("messages", "episodes", "audit", "facts", "runs")


def _count(row: tuple[Any, ...] | None) -> int:
    return int(row[0]) if row else 0


@contextlib.contextmanager
def appending(backend: Backend, mode: str) -> Iterator[None]:
    """The backend's audit append as agentd does it (chained), or as it was (unchained), for a block."""
    chained = backend.handlers[AppendAudit]
    backend.handlers[AppendAudit] = chained if mode == "chained" else backend.unchained
    try:
        yield
    finally:
        backend.handlers[AppendAudit] = chained


# -- 1. the turn path ----------------------------------------------------------------------------


def remember(agent: Agent, conversation: str, i: int) -> Awaitable[Any]:
    text = f"remember key{i % 50}: value {i}"
    return agent.handle(InboundEvent(agent.name, conversation, text, "webhook", user_id="u"))


async def turn_path(backend: Backend, turns: int, rounds: int) -> dict[str, Any]:
    """Two agents, one per way of appending, taking turns in short batches (the handler swapped
    between batches), so the machine's noise falls on both alike."""
    timings: dict[str, list[float]] = {mode: [] for mode in MODES}
    async with Resources(backend.fresh("turns"), backend.root / "turns") as resources:
        agents = {mode: await resources.open_agent(SPEC.model_copy(update={"name": mode})) for mode in MODES}
        try:
            for r in range(rounds + 1):  # the first round warms up, and is not counted
                for mode in MODES if r % 2 else MODES[::-1]:
                    with appending(backend, mode):
                        start = time.perf_counter()
                        for i in range(turns):
                            await remember(agents[mode], f"webhook:c{i % 20}", r * turns + i)
                        if r:
                            timings[mode].append((time.perf_counter() - start) / turns * 1e6)
        finally:
            for agent in agents.values():
                await agent.close()
    record = AuditRecord("tool", "called", "webhook:c1", uuid.uuid4().hex, tool_event_data(1))
    seal_us = timed_per_call(
        lambda: link(bytes(32), 1, seal(record, time.time(), "bot", "host:1:abc").digest), 20_000
    )
    return {
        "turn_us": {mode: statistics.median(values) for mode, values in timings.items()},
        "rounds": timings,
        "seal_event_us": seal_us,
    }


async def two_daemons(backend: Backend, turns: int, rounds: int, conversations: int = 4) -> dict[str, Any]:
    """Two daemons (each its own Resources: threads, connections) serving one agent, each with
    `conversations` conversations of `remember` turns at once: turns per second, per way of appending."""
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    settings = backend.fresh("daemons")
    async with contextlib.AsyncExitStack() as stack:
        daemons = [
            await stack.enter_async_context(Resources(settings, backend.root / "daemons")) for _ in range(2)
        ]
        agents: dict[str, list[Agent]] = {}
        for mode in MODES:
            agents[mode] = [
                await d.open_agent(SPEC.model_copy(update={"name": f"shared-{mode}"})) for d in daemons
            ]
            for agent in agents[mode]:
                stack.push_async_callback(agent.close)

        async def conversation(agent: Agent, key: str, first: int) -> None:
            for i in range(turns):
                await remember(agent, key, first + i)

        for r in range(rounds + 1):  # the first round warms up, and is not counted
            for mode in MODES if r % 2 else MODES[::-1]:
                with appending(backend, mode):
                    start = time.perf_counter()
                    await asyncio.gather(
                        *(
                            conversation(agent, f"webhook:d{d}-c{c}", r * turns)
                            for d, agent in enumerate(agents[mode])
                            for c in range(conversations)
                        )
                    )
                    if r:
                        rates[mode].append(2 * conversations * turns / (time.perf_counter() - start))
        verdict = await verify_store(agents["chained"][0].state.store, "shared-chained")
        assert verdict.ok, verdict
    return {"turns_per_s": {mode: statistics.median(v) for mode, v in rates.items()}, "rounds": rates}


def timed_per_call(job: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        job()
    return (time.perf_counter() - start) / n * 1e6


# -- 2. verify ------------------------------------------------------------------------------------


def tool_event_data(i: int) -> dict[str, Any]:
    return {
        "tool": "notes__write_note",
        "server": "notes",
        "user": f"person-{i % 2000}",
        "args": {"name": f"note-{i}", "text": "[redacted]"},
        "duration_ms": round(random.random() * 40, 3),
        "rule": "allow: notes.*",
    }


def events(n: int) -> list[AuditRecord]:
    out = []
    for i in range(n):
        key = f"discord:dm:person-{i % 2000}"
        if i % 3:
            out.append(AuditRecord("tool", "called", key, uuid.uuid4().hex, tool_event_data(i)))
        else:
            out.append(
                AuditRecord(
                    "memory",
                    "remember",
                    key,
                    uuid.uuid4().hex,
                    {"key": f"k{i % 97}", "scope": f"user:person-{i % 2000}"},
                )
            )
    return out


async def fill_audit(store: Store, n: int, batch: int = 1000) -> None:
    records = events(n)
    for start in range(0, n, batch):
        await store.write(AppendAudit("bench", records[start : start + batch], time.time()))


async def verify(backend: Backend, n: int) -> dict[str, Any]:
    export = backend.root / "verify.jsonl"
    async with backend.store("verify") as store:
        log(f"{backend.name} verify: appending {n:,} events")
        start = time.perf_counter()
        await fill_audit(store, n)
        append_s = time.perf_counter() - start
        log(f"{backend.name} verify: walking the chain")
        start = time.perf_counter()
        verdict = await verify_store(store, "bench")
        verify_s = time.perf_counter() - start
        assert verdict.ok and verdict.events == n, verdict
        start = time.perf_counter()
        with export.open("w") as out:
            after = 0
            while page := await store.read(AuditTrail(after, 5000)):
                out.writelines(export_line("bench", e) + "\n" for e in page)
                after = page[-1]["seq"]
        export_s = time.perf_counter() - start
    offline_s = await asyncio.to_thread(verify_offline, export)
    return {
        "events": n,
        "append_s": append_s,
        "verify_s": verify_s,
        "export_s": export_s,
        "export_mb": export.stat().st_size / 2**20,
        "offline_verify_s": offline_s,
    }


def verify_offline(export: Path) -> float:
    """Seconds docs/verify_audit.py takes on the export (it must pass)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-I", str(VERIFIER), str(export)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return time.perf_counter() - start


# -- 3. erase -------------------------------------------------------------------------------------


TARGET = "person-7"


def exchange(key: str, thread_id: int | None, seq: int, user: str, said: str, reply: str) -> CommitTurn:
    """One turn: `user` says `said` at `seq`, the agent answers `reply` (a new thread when thread_id is None)."""
    run = RunRecord(uuid.uuid4().hex, key, "message", "offline/offline", "ok", time.time())
    messages = [
        StoredMessage(seq, Message.user(said, user_id=user), run.id),
        StoredMessage(seq + 1, Message.assistant(reply), run.id),
    ]
    return CommitTurn(key, thread_id, messages, run, None, None, time.time())


async def fill_agent(
    store: Store,
    people: int,
    dm_messages: int,
    groups: int,
    group_messages: int,
    episodes: int,
    audit: int,
) -> None:
    rng = random.Random(7)
    ops: list[Write[Any]] = []

    async def flush() -> None:
        if ops:
            await store.write(*ops)
            ops.clear()

    for p in range(people):
        user, key = f"person-{p}", f"discord:dm:person-{p}"
        # a new thread's first turn makes it (its id is read back)
        thread_id = await write_one(store, exchange(key, None, 1, user, f"hello from {user}", "hi"))
        for seq in range(3, dm_messages, 2):
            said = f"{user} says thing {seq} about {rng.random():.6f}"
            ops.append(exchange(key, thread_id, seq, user, said, f"noted {seq}"))
        now = time.time()
        ops += [
            UpsertFact(f"user:{user}", f"fact{k}", f"{user} value {k}", 0.9, None, None, now)
            for k in range(10)
        ]
        ops += [UpsertMemory(f"user:{user}", f"m{k}", f"{user} memory {k}", None, now) for k in range(2)]
        if len(ops) > 400:
            await flush()
        if p % 500 == 0:
            log(f"erase: {p:,} people")
    await flush()
    for g in range(groups):
        key = f"discord:group-{g}"
        thread_id = await write_one(store, exchange(key, None, 1, TARGET, "welcome", "hi all"))
        for seq in range(3, group_messages, 2):
            user = TARGET if rng.random() < 0.02 else f"person-{rng.randrange(people)}"
            ops.append(exchange(key, thread_id, seq, user, f"{user} in the group {seq}", f"reply {seq}"))
            if len(ops) > 400:
                await flush()
    await flush()
    log(f"erase: {episodes:,} episodes")
    vectors = np.random.default_rng(7).standard_normal((1000, DIM)).astype(np.float32)
    batch: list[NewEpisode] = []
    for i in range(episodes):
        user = f"person-{i % people}"
        text = f"{user} told me about trip {i} to the mountains and the lake"
        batch.append(
            NewEpisode(
                f"user:{user}",
                f"discord:dm:{user}",
                text,
                time.time(),
                1.0,
                None,
                "hash/256",
                vectors[i % 1000].tobytes(),
            )
        )
        if len(batch) == 2000:
            await store.write(InsertEpisodes(batch))
            batch = []
    if batch:
        await store.write(InsertEpisodes(batch))
    log(f"erase: {audit:,} audit events")
    await fill_audit(store, audit)


async def erase(backend: Backend, scale: float) -> dict[str, Any]:
    people, groups = int(2000 * scale), 20
    async with backend.store("erase") as store:
        log(f"{backend.name} erase: filling")
        start = time.perf_counter()
        group_messages = int(1000 * scale) if scale < 1 else 1000
        await fill_agent(
            store, people, 50, groups, group_messages, int(100_000 * scale), int(100_000 * scale)
        )
        fill_s = time.perf_counter() - start
        counts_before = await asyncio.to_thread(backend.row_counts, "erase", STORED_TABLES)
        start = time.perf_counter()
        data = await store.read(PersonData(TARGET))
        export_s = time.perf_counter() - start
        subject = subject_of(TARGET)
        layers = layer_erasure()
        op = ErasePerson("bench", TARGET, subject, "bench", time.time(), None, layers.rebuild, layers.drop)
        start = time.perf_counter()
        counts = await write_one(store, op)
        erase_s = time.perf_counter() - start
        assert not any((await store.read(PersonData(TARGET))).values())
        verdict = await verify_store(store, "bench")
        assert verdict.ok, verdict
    return {
        "stored": counts_before,
        "size_mb": await asyncio.to_thread(backend.size_mb, "erase"),
        "fill_s": fill_s,
        "exported_items": {k: len(v) for k, v in data.items()},
        "export_s": export_s,
        "erased": counts,
        "erase_s": erase_s,
    }


# -- main -------------------------------------------------------------------------------------------


def report(name: str, results: dict[str, Any]) -> str:
    t, v, e = results["turn"], results["verify"], results["erase"]
    lines = [
        f"## {name}",
        "",
        "### The turn path (a `remember` turn: two audit events)",
        "",
        f"| append | µs per turn (median of {len(t['rounds']['chained'])} batches of 100) |",
        "|---|---:|",
        *(f"| {mode} | {us:,.0f} |" for mode, us in t["turn_us"].items()),
        "",
        f"Sealing one event alone (nonces, commitments, digest, link): {t['seal_event_us']:.1f} µs.",
        "",
    ]
    if "daemons" in results:
        d = results["daemons"]
        lines += [
            "### Two daemons, one agent, 4 conversations each at once",
            "",
            f"| append | turns per second (median of {len(d['rounds']['chained'])} rounds) |",
            "|---|---:|",
            *(f"| {mode} | {rate:,.0f} |" for mode, rate in d["turns_per_s"].items()),
            "",
        ]
    lines += [
        f"### Verify {v['events']:,} events",
        "",
        "| step | seconds |",
        "|---|---:|",
        f"| append them (batches of 1,000) | {v['append_s']:.2f} |",
        f"| `verify_store` (agentd audit verify) | {v['verify_s']:.2f} |",
        f"| export as JSON lines ({v['export_mb']:.0f} MB) | {v['export_s']:.2f} |",
        f"| docs/verify_audit.py on the export | {v['offline_verify_s']:.2f} |",
        "",
        f"### Erase one person from an agent of {e['size_mb']:.0f} MB",
        "",
        "Stored: " + ", ".join(f"{n:,} {t}" for t, n in e["stored"].items()) + ".",
        "",
        "| step | seconds | what |",
        "|---|---:|---|",
        f"| export (PersonData) | {e['export_s']:.3f} | "
        + ", ".join(f"{n} {k}" for k, n in e["exported_items"].items() if n)
        + " |",
        f"| erase (ErasePerson, committed) | {e['erase_s']:.3f} | "
        + ", ".join(f"{n} {k}" for k, n in e["erased"].items())
        + " |",
    ]
    return "\n".join(lines)


async def run_parts(backend: Backend, quick: bool) -> dict[str, Any]:
    scale = 0.1 if quick else 1.0
    log(f"{backend.name}: turn path")
    results = {"turn": await turn_path(backend, 100, 4 if quick else 20)}
    if backend.server is not None:
        log(f"{backend.name}: two daemons")
        results["daemons"] = await two_daemons(backend, 25, 2 if quick else 6)
    results["verify"] = await verify(backend, int(100_000 * scale))
    results["erase"] = await erase(backend, scale)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tenth of the data")
    parser.add_argument("--postgres", action="store_true", help="also on a throwaway PostgreSQL server")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        backends = [Backend("SQLite", root / "sqlite")]
        if args.postgres:  # (started here, in the main thread, which outlives it: testkit/postgres.py)
            server = stack.enter_context(PostgresServer(settings={}))
            backends.append(Backend("PostgreSQL", root / "postgres", server))
        for backend in backends:
            results[backend.name] = asyncio.run(run_parts(backend, args.quick))
    print("\n\n".join(report(name, r) for name, r in results.items()))
    out = write_results("audit", results, indent=2)
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
