"""PostgreSQL drivers on agentd's turn path: asyncpg against psycopg 3, with pgbench on the same server.

    python bench/pg_drivers.py            # full run (~2-3 min on 2 cores)
    python bench/pg_drivers.py --quick    # smoke run (~30 s)

Starts a throwaway PostgreSQL server with PostgreSQL's default settings (testkit.postgres),
creates a schema shaped like the turn path's and measures one turn (bench/pg_turn.py says exactly what
it is) per driver: sequential per-turn p50/p95, and turns/s with 100 concurrent conversations. pgbench
runs the same turn, and performance.md's plain two-insert transaction, against the same server in the
same run: the machine's limit, with C's libpq as the client.

The machine is shared and noisy, so the drivers are interleaved rather than run one after another:
sequential turns go in blocks, each block of every driver in a fresh random order; the concurrent
cells and the pgbench runs go in rounds, all in a fresh random order in every round. Every cell checks
afterwards that the database holds what it claims to have written.
Markdown on stdout, progress on stderr, raw numbers in bench/results/pg_drivers-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
from _common import pct, write_results  # bench/_common.py: first, it puts the repository root on the path
from pg_turn import DRIVERS, SCHEMA, Conversation, Driver, Turn, body, open_driver

from testkit.postgres import PostgresServer

CONVERSATIONS = 100  # threads 1..100: the concurrent cells' conversations
SEQUENTIAL_BASE = 200  # threads 201..: one per driver for the sequential cells
PGBENCH_BASE = 1000  # threads 1001..: one per pgbench client

BODY_LITERAL = "'" + body(random.Random(1), "user").replace("'", "''") + "'"
PGBENCH_ROUND_TRIPS = {"2 inserts": 4, "turn": 7}
PGBENCH_SCRIPTS = {
    # performance.md's "BEGIN; 2 INSERTs; COMMIT"
    "2 inserts": f"""\\set t :client_id + {PGBENCH_BASE + 1}
\\set s :s + 2
BEGIN;
INSERT INTO messages (thread_id, seq, role, body) VALUES (:t, :s, 'user', {BODY_LITERAL});
INSERT INTO messages (thread_id, seq, role, body) VALUES (:t, :s::bigint + 1, 'assistant', {BODY_LITERAL});
COMMIT;
""",
    # bench/pg_turn.py's turn, statement for statement (the drivers check the results; pgbench cannot)
    "turn": f"""\\set t :client_id + {PGBENCH_BASE + 1}
\\set s :s + 2
\\set r :s * 10000 + :t
BEGIN;
SELECT fence FROM conversation_leases WHERE thread_id = :t FOR SHARE;
SELECT version FROM threads WHERE id = :t;
INSERT INTO messages (thread_id, seq, role, body, run_id)
  VALUES (:t, :s, 'user', {BODY_LITERAL}, :r), (:t, :s::bigint + 1, 'assistant', {BODY_LITERAL}, :r);
INSERT INTO runs (id, thread_id, status, input_tokens, output_tokens) VALUES (:r, :t, 'ok', 120, 80);
UPDATE threads SET version = version + 1, updated_at = now() WHERE id = :t;
COMMIT;
""",
}


@dataclass
class Database:
    """The benchmark's database on the throwaway server, and what the cells have written to it."""

    server: PostgresServer
    name: str = "bench"
    pgbench_runs: int = 0

    @property
    def url(self) -> str:
        return self.server.url(self.name)

    def create(self, pgbench_clients: int) -> None:
        """The schema, and a thread with a lease held at fence 1 for every conversation of the run."""
        self.server.create_database(self.name)
        self.server.psql(SCHEMA, self.name)
        ranges = [
            (1, CONVERSATIONS),
            (SEQUENTIAL_BASE + 1, SEQUENTIAL_BASE + len(DRIVERS)),
            (PGBENCH_BASE + 1, PGBENCH_BASE + pgbench_clients),
        ]
        ids = " UNION ALL ".join(f"SELECT generate_series({low}, {high})" for low, high in ranges)
        self.server.psql(
            f"INSERT INTO threads (id, conversation_key) SELECT i, 'webhook:c' || i FROM ({ids}) AS ids (i);"
            "INSERT INTO conversation_leases (thread_id, holder, fence, expires_at) "
            "SELECT id, 'bench', 1, now() + interval '1 day' FROM threads; ANALYZE; CHECKPOINT;",
            self.name,
        )

    def counts(self) -> tuple[int, int, int]:
        """(messages, runs, sum of thread versions): a turn adds (2, 1, 1); a two-insert (2, 0, 0)."""
        out = self.server.psql(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM runs),"
            " (SELECT sum(version) FROM threads)",
            self.name,
        )
        messages, runs, versions = (int(part) for part in out.strip().split("|"))
        return messages, runs, versions

    async def checked(self, what: str, turns_of: Callable[[], Awaitable[tuple[int, bool]]]) -> None:
        """Run a cell; it returns (transactions, full turns?); the tables must have grown by exactly that."""
        before = self.counts()
        transactions, full = await turns_of()
        grown = tuple(after - was for after, was in zip(self.counts(), before, strict=True))
        expected = (2 * transactions, transactions if full else 0, transactions if full else 0)
        if grown != expected:
            raise AssertionError(f"{what}: expected (messages, runs, versions) +{expected}, found +{grown}")


@dataclass
class Samples:
    latencies_ms: list[float] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)  # per round
    cpu_s: float = 0.0  # this process, all threads
    server_cpu_s: float = 0.0  # the server's processes
    turns: int = 0

    def summary(self) -> dict[str, float]:
        summary = {
            "p50_ms": pct(self.latencies_ms, 50),
            "p95_ms": pct(self.latencies_ms, 95),
            "turns": self.turns,
        }
        if self.throughputs:
            summary["turns_per_s"] = statistics.median(self.throughputs)
            summary["turns_per_s_min"], summary["turns_per_s_max"] = (
                min(self.throughputs),
                max(self.throughputs),
            )
        if self.cpu_s:
            summary["client_cpu_us_per_turn"] = 1e6 * self.cpu_s / self.turns
            summary["server_cpu_us_per_turn"] = 1e6 * self.server_cpu_s / self.turns
        return summary


def server_cpu_ns(postmaster: int) -> int:
    """CPU time the server has used so far: the postmaster and its live children (/proc/<pid>/schedstat, ns).

    Only meaningful across a stretch in which no backend exits: a driver's connections stay open
    through its cell (pgbench's do not, so its rows have no CPU figures).
    """
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == postmaster or int(entry.name) == postmaster:
                total += int((entry / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # the process ended while we looked
            continue
    return total


@contextmanager
def metered(got: Samples, postmaster: int) -> Iterator[None]:
    """Add the client's and the server's CPU time over the block to `got` (the /proc scans stay outside)."""
    server = server_cpu_ns(postmaster)
    client = time.process_time()
    yield
    got.cpu_s += time.process_time() - client
    got.server_cpu_s += (server_cpu_ns(postmaster) - server) / 1e9


# -- sequential: one conversation per driver, blocks interleaved -------------------------------------


async def sequential(db: Database, args: argparse.Namespace, user: str, reply: str) -> dict[str, Samples]:
    opened = []
    for index, driver in enumerate(DRIVERS):
        turn, close = await open_driver(driver, db.url, 1, user, reply)
        opened.append((driver, turn, close, Conversation(SEQUENTIAL_BASE + index + 1)))
    samples = {driver.name: Samples() for driver in DRIVERS}

    async def block(turn: Turn, conv: Conversation, got: Samples) -> tuple[int, bool]:
        with metered(got, db.server.pid):
            for _ in range(args.block):
                start = time.perf_counter()
                await turn(conv)
                got.latencies_ms.append(1e3 * (time.perf_counter() - start))
        got.turns += args.block
        return args.block, True

    try:
        for _driver, turn, _, conv in opened:  # warm: statements prepared, caches filled
            for _ in range(args.warm):
                await turn(conv)
        for number in range(args.blocks):
            print(f"sequential block {number + 1}/{args.blocks}", file=sys.stderr, flush=True)
            for driver, turn, _, conv in random.sample(opened, len(opened)):
                got = samples[driver.name]
                await db.checked(driver.name, lambda turn=turn, conv=conv, got=got: block(turn, conv, got))
    finally:
        for _, _, close, _ in opened:
            await close()
    return samples


# -- concurrent: 100 conversations, rounds of every cell in random order ------------------------------


async def concurrent_round(
    turn_and_close: Awaitable[tuple[Turn, Callable[[], Awaitable[None]]]],
    conversations: list[Conversation],
    per_conversation: int,
    postmaster: int,
    got: Samples,
) -> tuple[int, bool]:
    """One round of one driver: every conversation does `per_conversation` turns, all at once."""
    turn, close = await turn_and_close
    try:
        await asyncio.gather(*(turn(conv) for conv in conversations))  # warm: every connection and thread

        async def talk(conv: Conversation) -> None:
            for _ in range(per_conversation):
                start = time.perf_counter()
                await turn(conv)
                got.latencies_ms.append(1e3 * (time.perf_counter() - start))

        with metered(got, postmaster):
            wall = time.perf_counter()
            await asyncio.gather(*(talk(conv) for conv in conversations))
            wall = time.perf_counter() - wall
    finally:
        await close()
    timed = len(conversations) * per_conversation
    got.throughputs.append(timed / wall)
    got.turns += timed
    return timed + len(conversations), True


def pgbench_round(db: Database, script: str, clients: int, seconds: int, got: Samples) -> tuple[int, bool]:
    """pgbench with prepared statements over TCP, like the drivers; latency percentiles from its log."""
    db.pgbench_runs += 1
    with tempfile.TemporaryDirectory() as scratch:
        script_path = Path(scratch) / "script.sql"
        script_path.write_text(PGBENCH_SCRIPTS[script])
        command = [str(db.server.bindir / "pgbench"), "-n", "-M", "prepared", "-T", str(seconds)]
        command += ["-c", str(clients), "-j", str(min(clients, os.cpu_count() or 1))]
        # each run's messages get their own seq range, so runs never collide on (thread_id, seq)
        command += ["-D", f"s={db.pgbench_runs * 10_000_000}", "-l", "--log-prefix", f"{scratch}/log"]
        address = ["-h", "127.0.0.1", "-p", str(db.server.port), "-U", "postgres", db.name]
        command += ["-f", str(script_path), *address]
        done = subprocess.run(command, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed: {done.stderr}")
        logs = list(Path(scratch).glob("log*"))
        # per transaction: client_id transaction_no latency_us script_no epoch epoch_us
        got.latencies_ms += [
            int(line.split()[2]) / 1e3 for log in logs for line in log.read_text().splitlines()
        ]
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)
    count = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    if tps is None or count is None:
        raise RuntimeError(f"unexpected pgbench output:\n{done.stdout}")
    got.throughputs.append(float(tps[1]))
    got.turns += int(count[1])
    return int(count[1]), script == "turn"


async def concurrent(db: Database, args: argparse.Namespace, user: str, reply: str) -> dict[str, Samples]:
    conversations = [Conversation(i) for i in range(1, CONVERSATIONS + 1)]
    cells: list[tuple[str, Callable[[Samples], Awaitable[tuple[int, bool]]]]] = []
    for driver in DRIVERS:
        for size in args.threads if driver.kind == "psycopg-sync" else args.pool_sizes:

            def run(got: Samples, driver: Driver = driver, size: int = size) -> Awaitable[tuple[int, bool]]:
                opening = open_driver(driver, db.url, size, user, reply)
                return concurrent_round(opening, conversations, args.per_conversation, db.server.pid, got)

            cells.append((driver.label(size), run))
    for script, clients in itertools.product(PGBENCH_SCRIPTS, args.pgbench_clients):

        async def bench(got: Samples, script: str = script, clients: int = clients) -> tuple[int, bool]:
            return await asyncio.to_thread(pgbench_round, db, script, clients, args.pgbench_seconds, got)

        cells.append((f"pgbench, {script}, {clients} client{'s' * (clients > 1)}", bench))
    samples = {name: Samples() for name, _ in cells}
    for round_no in range(args.rounds):
        for name, run_cell in random.sample(cells, len(cells)):
            print(f"round {round_no + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
            await db.checked(name, lambda run_cell=run_cell, name=name: run_cell(samples[name]))
    return samples


# -- the report ------------------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms"


def cpu(got: dict[str, float]) -> str:
    if "client_cpu_us_per_turn" not in got:
        return "— | —"
    return f"{got['client_cpu_us_per_turn']:.0f} µs | {got['server_cpu_us_per_turn']:.0f} µs"


def report(seq: dict[str, Samples], conc: dict[str, Samples], args: argparse.Namespace) -> str:
    lines = [
        f"### Sequential turn, one conversation ({args.blocks} blocks of {args.block} turns per driver, interleaved)",
        "",
        "| driver | round trips | p50 | p95 | CPU per turn: client | server |",
        "|---|---|---|---|---|---|",
    ]
    for driver in DRIVERS:
        got = seq[driver.name].summary()
        lines.append(
            f"| {driver.name} | {driver.round_trips} | {ms(got['p50_ms'])} | {ms(got['p95_ms'])} | {cpu(got)} |"
        )
    for script in PGBENCH_SCRIPTS:
        name = f"pgbench, {script}, 1 client"
        if name in conc:
            got = conc[name].summary()
            trips = PGBENCH_ROUND_TRIPS[script]
            lines.append(
                f"| {name} (C libpq) | {trips} | {ms(got['p50_ms'])} | {ms(got['p95_ms'])} | — | — |"
            )
    lines += [
        "",
        f"### {CONVERSATIONS} concurrent conversations, {args.per_conversation} turns each per round "
        f"(median of {args.rounds} interleaved rounds)",
        "",
        "| driver | turns/s (min–max) | p50 | p95 | CPU per turn: client | server |",
        "|---|---|---|---|---|---|",
    ]
    for name, samples in conc.items():
        got = samples.summary()
        spread = f"{got['turns_per_s']:,.0f} ({got['turns_per_s_min']:,.0f}–{got['turns_per_s_max']:,.0f})"
        lines.append(f"| {name} | {spread} | {ms(got['p50_ms'])} | {ms(got['p95_ms'])} | {cpu(got)} |")
    return "\n".join(lines)


def sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: fewer blocks, one round of one pool size, 1 s pgbench",
    )
    parser.add_argument("--blocks", type=int, default=20, help="sequential: blocks per driver")
    parser.add_argument("--block", type=int, default=100, help="sequential: turns per block")
    parser.add_argument("--warm", type=int, default=100, help="sequential: untimed turns per driver first")
    parser.add_argument("--rounds", type=int, default=5, help="concurrent: rounds of every cell")
    parser.add_argument("--per-conversation", type=int, default=10, help="concurrent: turns per conversation")
    parser.add_argument("--pool-sizes", type=sizes, default=[4, 16], help="async pools' connections")
    parser.add_argument(
        "--threads", type=sizes, default=[2, 4, 8], help="psycopg sync: threads (= connections)"
    )
    parser.add_argument("--pgbench-seconds", type=int, default=3)
    parser.add_argument("--pgbench-clients", type=sizes, default=[1, 16])
    args = parser.parse_args()
    if args.quick:
        args.blocks, args.block, args.warm, args.rounds, args.pgbench_seconds = 2, 30, 10, 1, 1
        args.per_conversation, args.pool_sizes, args.threads = 2, [4], [4]

    load_before = os.getloadavg()
    rng = random.Random(7)
    user, reply = body(rng, "user"), body(rng, "assistant")
    with PostgresServer(settings={}) as server:  # PostgreSQL's defaults, as performance.md's pgbench
        db = Database(server)
        db.create(max(args.pgbench_clients))
        server_version = server.psql("SHOW server_version").strip()
        seq = await sequential(db, args, user, reply)
        conc = await concurrent(db, args, user, reply)
    load_after = os.getloadavg()
    print(report(seq, conc, args))
    print(
        f"\nPostgreSQL {server_version}, default settings; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after, on {os.cpu_count()} cores; nice {os.nice(0)}"
    )
    result: dict[str, Any] = {
        "config": vars(args),
        "server_version": server_version,
        "versions": {pkg: version(pkg) for pkg in ("asyncpg", "psycopg", "psycopg-binary", "psycopg-pool")},
        "psycopg_impl": psycopg.pq.__impl__,
        "python": platform.python_version(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "nice": os.nice(0),
        "sequential": {name: s.summary() | {"latencies_ms": s.latencies_ms} for name, s in seq.items()},
        "concurrent": {name: s.summary() | {"throughputs": s.throughputs} for name, s in conc.items()},
    }
    out = write_results("pg_drivers", result)
    print(f"raw numbers: {out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
