"""Several daemons on one PostgreSQL server: the turn, the throughput of 1, 2 and 3 daemons, and pgbench.

    nice python bench/replicas.py            # full run (~6-8 min on 2 cores)
    nice python bench/replicas.py --quick    # smoke run (~2 min)

One throwaway PostgreSQL server (testkit.postgres, PostgreSQL's *default* settings: fsync and
synchronous commit on) serves the whole run:

1. **The turn**: per-turn p50/p95 of `Agent.handle` with a zero-latency model at L = 10 / 1,000 / 10,000
   messages, on SQLite and on PostgreSQL, with bench/pg_turn.py's one-transaction floor: bench/turns.py's
   cells (`seq_cell`), in a fresh random order per rep.
2. **Daemons**: `agentd run` processes (the built-in offline model, one agent, webhook), 1, 2 or 3 of them
   on one fresh database each cell; 100 conversations, each sending its next message to a random daemon
   once the last was answered (no stickiness), for `--seconds` after a warm-up. turns/s, latency, and
   the CPU of every process (/proc) and of the machine; what PostgreSQL's backends were doing
   (pg_stat_activity, sampled); the database checked afterwards (2 messages and 1 run per turn).
   With 2 and 3 daemons, the same again with each conversation always sent to the same daemon (as a
   load balancer hashing the conversation would): what no stickiness costs. And bench/turns.py's 100
   conversations in one process (zero-latency model, no HTTP), on SQLite and on PostgreSQL.
3. **pgbench**: BEGIN; 2 INSERTs; COMMIT at 1 and 16 clients on the same server (bench/pg_drivers.py's
   script): the machine's limit for a turn's writes.

Parts 2 and 3 go in rounds, in a fresh random order each round. Markdown on stdout, progress on
stderr, raw numbers in bench/results/replicas-<timestamp>.json. What the figures mean: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import turns  # (bench/ is on the path: the benchmark scripts' folder)
from _common import (  # bench/_common.py: first, it puts the repository root on the path
    RESULTS,
    log,
    median,
    pct,
    write_results,
)
from http_load import Load, Meter, WaitSampler, drive
from pg_drivers import Database, Samples, pgbench_round

from agents import DaemonRun
from testkit.postgres import PostgresServer

HERE = Path(__file__).resolve().parent.parent
AGENT = "memory: {scope: thread, compact_at_tokens: false}\nchannels: {webhook: {}}\n"
SEQ_KINDS = ("agentd-zero", "agentd-pg", "base-pg")


# -- 1. the turn ---------------------------------------------------------------------------------------


async def seq_rep(rep: int, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    rng = random.Random(100 + rep)
    cells = [(L, kind) for L in args.lengths for kind in SEQ_KINDS]
    rng.shuffle(cells)
    out: dict[str, dict[str, Any]] = {kind: {} for kind in SEQ_KINDS}
    for L, kind in cells:
        cell = out[kind][str(L)] = await turns.seq_cell(kind, L, args, rng)
        log(
            f"seq rep{rep} L={L:>5} {kind:<12} p50={cell['p50_us']:>7.0f}us p95={cell['p95_us']:>7.0f}us n={cell['n']}"
        )
    return out


# -- 2. daemons ----------------------------------------------------------------------------------------


async def daemons_cell(
    server: PostgresServer, count: int, args: argparse.Namespace, rng: random.Random, sticky: bool = False
) -> dict[str, Any]:
    """`count` daemons on a fresh database, 100 conversations to random daemons (`sticky`: each always
    to the same one); figures and CPU."""
    database = f"daemons_{count}_{rng.randrange(1 << 30)}"
    url = server.create_database(database)
    roots = [Path(tempfile.mkdtemp(prefix="agentd-replicas-", dir=args.dir)) for _ in range(count)]
    runs: list[DaemonRun] = []
    try:
        for root in roots:
            (root / "agents").mkdir()
            (root / "agents" / "bench.yaml").write_text(AGENT)
            (root / "agentd.yaml").write_text(f"store: {{url: '{url}'}}\n")
            runs.append(DaemonRun(root, HERE, None))
        for run in runs:
            run.start()
        ports = [run.port for run in runs]
        keys = [f"c{i}" for i in range(args.conversations)]
        await drive(ports, keys, args.warmup, rng, "bench", sticky)  # each daemon loads what it gets
        before = counts(server, database)
        pids = [run.proc.pid for run in runs if run.proc is not None]
        profiler = profile(pids[0], count, args) if args.profile else None
        with Meter(pids, server.pid) as meter, WaitSampler(url, database) as waits:
            load = await drive(ports, keys, args.seconds, rng, "bench", sticky)
        if profiler is not None:
            profiler.wait()
        grown = tuple(a - b for a, b in zip(counts(server, database), before, strict=True))
        if grown != (2 * load.turns, load.turns):
            raise AssertionError(
                f"{count} daemons: expected +{2 * load.turns} messages and +{load.turns} runs, found +{grown}"
            )
    finally:
        for run in runs:
            run.stop()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        server.drop_database(database)
    return summary(load, meter, waits)


def profile(pid: int, count: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """py-spy (pip install py-spy) samples the first daemon's threads through the timed load: collapsed
    stacks, one line per stack with its count, in bench/results/replicas-profile-<n>-daemons-<time>.txt."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"replicas-profile-{count}-daemons-{time.strftime('%Y%m%d-%H%M%S')}.txt"
    command = ["py-spy", "record", "-p", str(pid), "-d", str(max(1, int(args.seconds))), "-r", "200"]
    command += ["-f", "raw", "-o", str(out), "--threads"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def counts(server: PostgresServer, database: str) -> tuple[int, int]:
    out = server.psql(
        "SELECT (SELECT count(*) FROM agentd.messages), (SELECT count(*) FROM agentd.runs)", database
    )
    messages, runs = (int(x) for x in out.strip().split("|"))
    return messages, runs


def summary(load: Load, meter: Meter, waits: WaitSampler | None = None) -> dict[str, Any]:
    cpu = dict(meter.cpu)
    cpu["load generator"] = load.client_cpu_s
    ours = sum(v for k, v in cpu.items() if k != "machine")
    cpu["others on the machine"] = max(cpu.pop("machine") - ours, 0.0)
    return {
        "turns": load.turns,
        "wall_s": round(load.wall_s, 3),
        "turns_per_s": round(load.turns_per_s, 1),
        "p50_ms": round(pct(load.latencies_ms, 50), 3),
        "p95_ms": round(pct(load.latencies_ms, 95), 3),
        "cores_busy": {name: round(seconds / load.wall_s, 3) for name, seconds in cpu.items()},
        "cpu_us_per_turn": {name: round(1e6 * seconds / load.turns, 1) for name, seconds in cpu.items()},
        "backends": {state: round(n, 3) for state, n in waits.shares().items()} if waits else {},
    }


async def inproc_cell(
    server: PostgresServer, backend: str, args: argparse.Namespace, rng: random.Random
) -> dict[str, Any]:
    """bench/turns.py's 100 concurrent conversations in one process (one agent, the zero-latency model,
    no HTTP), on SQLite or on PostgreSQL: the engine and the store without the web server."""
    database = f"inproc_{rng.randrange(1 << 30)}" if backend == "postgres" else None
    url = server.create_database(database) if database else None
    meters: list[Meter] = []

    def meter() -> Meter:
        meters.append(Meter([os.getpid()], server.pid))
        return meters[-1]

    try:
        r = await turns.conc_agentd("one-file", args, rng, url, meter)
    finally:
        if database:
            server.drop_database(database)
    timed = args.convs * args.conc_turns
    load = Load(timed, r["wall_s"], client_cpu_s=0.0)
    out = summary(load, meters[0])
    out["p50_ms"], out["p95_ms"] = r["p50_us"] / 1e3, r["p95_us"] / 1e3
    return out


# -- 3. pgbench ----------------------------------------------------------------------------------------


def pgbench_cell(db: Database, clients: int, seconds: int) -> dict[str, Any]:
    got = Samples()
    pgbench_round(db, "2 inserts", clients, seconds, got)
    return {
        "turns_per_s": got.throughputs[0],
        "p50_ms": pct(got.latencies_ms, 50),
        "p95_ms": pct(got.latencies_ms, 95),
    }


async def throughput_round(
    server: PostgresServer, db: Database, round_no: int, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    rng = random.Random(200 + round_no)
    cells: list[tuple[str, Any]] = [("daemons", n) for n in args.daemons]
    cells += [("sticky", n) for n in args.daemons if n > 1 and args.sticky]
    cells += [("pgbench", c) for c in args.pgbench_clients] + [("inproc", b) for b in ("sqlite", "postgres")]
    rng.shuffle(cells)
    out: dict[str, dict[str, Any]] = {}
    for kind, n in cells:
        name = f"{kind} {n}"
        if kind == "pgbench":
            out[name] = await asyncio.to_thread(pgbench_cell, db, n, args.pgbench_seconds)
        elif kind == "inproc":
            out[name] = await inproc_cell(server, n, args, rng)
        else:
            out[name] = await daemons_cell(server, n, args, rng, sticky=kind == "sticky")
        log(
            f"round {round_no + 1}: {name:<10} {out[name]['turns_per_s']:>8.0f}/s p50={out[name]['p50_ms']:.2f} ms"
        )
    return out


# -- the report ----------------------------------------------------------------------------------------


def report(data: dict[str, Any]) -> str:
    a = data["config"]
    lines = [
        f"## agentd on several daemons, one PostgreSQL ({data['started']}, {a['cpus']} CPUs, "
        f"reps {a['reps']}, rounds {a['rounds']}{', quick' if a['quick'] else ''})",
    ]
    if data["seq"]:
        lines += seq_table(data["seq"], a)
    if data["rounds"]:
        lines += throughput_tables(data["rounds"], a)
    return "\n".join(lines)


SEQ_LABELS = {
    "agentd-zero": "agentd turn on SQLite",
    "agentd-pg": "agentd turn on PostgreSQL",
    "base-pg": "PostgreSQL floor (one pipelined transaction, no claim)",
}


def seq_table(reps: list[dict[str, Any]], a: dict[str, Any]) -> list[str]:
    lengths = [str(L) for L in a["lengths"]]
    lines = [
        "",
        "### 1. One turn, zero-latency model, in process: p50 / p95 (medians over reps)",
        "",
        "| | " + " | ".join(f"L={int(L):,}" for L in lengths) + " |",
        "|---" * (len(lengths) + 1) + "|",
    ]
    for kind in SEQ_KINDS:
        cells = []
        for L in lengths:
            at_50 = median([r[kind][L]["p50_us"] for r in reps])
            at_95 = median([r[kind][L]["p95_us"] for r in reps])
            cells.append(f"{turns.fmt_us(at_50)} / {turns.fmt_us(at_95)}")
        lines.append(f"| {SEQ_LABELS[kind]} | " + " | ".join(cells) + " |")
    for over in ("agentd-zero", "base-pg"):
        ratios = [median([r["agentd-pg"][L]["p50_us"] / r[over][L]["p50_us"] for r in reps]) for L in lengths]
        lines.append(
            f"| PostgreSQL turn / {SEQ_LABELS[over]}, p50 | " + " | ".join(f"{x:.2f}×" for x in ratios) + " |"
        )
    p50 = [median([r["agentd-pg"][L]["p50_us"] for r in reps]) for L in lengths]
    lines += [
        "",
        f"PostgreSQL turn p50 at L={int(lengths[-1]):,} / L={int(lengths[0]):,}: {p50[-1] / p50[0]:.2f}; "
        f"worst p50 {turns.fmt_us(max(p50))} (issue 12's aim: ≤ 1 ms, flat from 10 to 10,000).",
    ]
    return lines


def throughput_tables(rounds: list[dict[str, Any]], a: dict[str, Any]) -> list[str]:
    def med(name: str, field: str) -> float:
        return median([r[name][field] for r in rounds])

    def cpu(name: str, field: str, part: str) -> float:
        """Medians over rounds of the daemons' sum (part "daemon") or of one part."""
        return median([sum(v for k, v in r[name][field].items() if k.startswith(part)) for r in rounds])

    rows = [(f"inproc {b}", f"in process, {b}, zero-latency model, no HTTP") for b in ("sqlite", "postgres")]
    rows += [(f"daemons {n}", f"{n} `agentd run` process{'es' * (n > 1)} over HTTP") for n in a["daemons"]]
    if a["sticky"]:
        rows += [
            (f"sticky {n}", f"{n} `agentd run` processes, each conversation always to the same one")
            for n in a["daemons"]
            if n > 1
        ]
    lines = [
        "",
        f"### 2. {a['conversations']} conversations at once, each message to a random daemon "
        f"({a['seconds']:g} s per HTTP cell, offline model), and pgbench on the same server",
        "",
        "| | turns/s, median (range) | p50 / p95 | CPU µs per turn: daemons + postgres + load generator "
        "| cores busy: ours + others on the machine |",
        "|---|---|---|---|---|",
    ]
    for name, label in rows:
        tps = [r[name]["turns_per_s"] for r in rounds]
        spent = [cpu(name, "cpu_us_per_turn", part) for part in ("daemon", "postgres", "load generator")]
        ours = median(
            [sum(v for k, v in r[name]["cores_busy"].items() if k != "others on the machine") for r in rounds]
        )
        others = cpu(name, "cores_busy", "others")
        lines.append(
            f"| {label} | {median(tps):,.0f} ({min(tps):,.0f}–{max(tps):,.0f}) | "
            f"{med(name, 'p50_ms'):.1f} / {med(name, 'p95_ms'):.1f} ms | "
            f"{spent[0]:,.0f} + {spent[1]:,.0f} + {spent[2]:,.0f} = {sum(spent):,.0f} | {ours:.2f} + {others:.2f} |"
        )
    for c in a["pgbench_clients"]:
        name = f"pgbench {c}"
        tps = [r[name]["turns_per_s"] for r in rounds]
        lines.append(
            f"| pgbench, BEGIN; 2 INSERTs; COMMIT, {c} client{'s' * (c > 1)} | {median(tps):,.0f} "
            f"({min(tps):,.0f}–{max(tps):,.0f}) | {med(name, 'p50_ms'):.2f} / {med(name, 'p95_ms'):.2f} ms | | |"
        )
    lines += ["", "What PostgreSQL's backends were doing (mean number per sample, the median round):", ""]
    for n in a["daemons"]:
        name = f"daemons {n}"
        ordered = sorted(rounds, key=lambda r: r[name]["turns_per_s"])
        states = ordered[len(ordered) // 2][name]["backends"]
        lines.append(f"- {n} daemon{'s' * (n > 1)}: " + ", ".join(f"{k} {v:.2f}" for k, v in states.items()))
    return lines


# -- the run -------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 rep, 1 round, short cells")
    ap.add_argument("--parts", type=lambda s: s.split(","), default=["seq", "daemons"])
    ap.add_argument("--reps", type=int, help="reps of the turn table (3; quick 1)")
    ap.add_argument("--rounds", type=int, help="rounds of daemons and pgbench cells (3; quick 1)")
    ap.add_argument(
        "--lengths", type=lambda s: [int(x) for x in s.split(",")], help="(10,1000,10000; quick 10,1000)"
    )
    ap.add_argument("--daemons", type=lambda s: [int(x) for x in s.split(",")], help="(1,2,3; quick 1,2)")
    ap.add_argument("--conversations", type=int, default=100)
    ap.add_argument(
        "--no-sticky", dest="sticky", action="store_false", help="skip the cells that pin each conversation"
    )
    ap.add_argument("--seconds", type=float, help="timed seconds per daemons cell (8; quick 2)")
    ap.add_argument("--warmup", type=float, help="untimed seconds of load first (1.5; quick 0.5)")
    ap.add_argument("--pgbench-clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16])
    ap.add_argument("--pgbench-seconds", type=int, help="(5; quick 2)")
    # bench/turns.py's cells read these
    ap.add_argument("--conc-length", type=int, default=100, help="L of the in-process conversations")
    ap.add_argument("--conc-turns", type=int, help="timed turns per in-process conversation (20; quick 5)")
    ap.add_argument("--n", type=int, help="timed turns per turn cell (60; quick 30)")
    ap.add_argument("--min-n", type=int, default=10)
    ap.add_argument("--budget", type=float, help="seconds per turn cell (10; quick 1.5)")
    ap.add_argument("--dir", default=None, help="where temporary files go")
    ap.add_argument(
        "--profile", action="store_true", help="py-spy the first daemon of each cell (see profile())"
    )
    a = ap.parse_args()
    a.gc_freeze = False
    a.convs = a.conversations
    a.conc_turns = a.conc_turns or (5 if a.quick else 20)
    a.reps = a.reps or (1 if a.quick else 3)
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.lengths = a.lengths or ([10, 1000] if a.quick else [10, 1000, 10000])
    a.daemons = a.daemons or ([1, 2] if a.quick else [1, 2, 3])
    a.warmup = a.warmup or (0.5 if a.quick else 1.5)
    a.seconds = a.seconds or (2.0 if a.quick else 8.0)
    a.pgbench_seconds = a.pgbench_seconds or (2 if a.quick else 5)
    a.n = a.n or (30 if a.quick else 60)
    a.budget = a.budget or (1.5 if a.quick else 10.0)
    return a


async def run(server: PostgresServer, a: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {"seq": [], "rounds": []}
    if "seq" in a.parts:
        for rep in range(a.reps):
            data["seq"].append(await seq_rep(rep, a))
    if "daemons" in a.parts:
        db = Database(server, name="pgbench")
        db.create(max(a.pgbench_clients))
        for round_no in range(a.rounds):
            data["rounds"].append(await throughput_round(server, db, round_no, a))
    return data


def main() -> None:
    a = parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    with PostgresServer(settings={}) as server:  # PostgreSQL's defaults, as performance.md's pgbench
        turns.POSTGRES = server
        data = asyncio.run(run(server, a))
    data |= {"kind": "replicas", "started": started, "argv": sys.argv[1:]}
    data["config"] = {**vars(a), "cpus": os.cpu_count()}
    path = write_results("replicas", data)
    log("wrote", path)
    print(report(data))


if __name__ == "__main__":
    main()
