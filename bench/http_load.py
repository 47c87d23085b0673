"""A load generator over HTTP and the meters around it, for benchmarks of `agentd run` processes.

    load = await drive([port1, port2], keys, seconds=5)      # each message to a random daemon
    with Meter(daemon_pids, postmaster_pid) as meter: ...   # CPU of each process over the block

The client is a bare HTTP/1.1 keep-alive connection on asyncio streams, not httpx: at thousands of
requests a second on a 2-core machine the load generator's own CPU must stay small next to the
daemons' (httpx costs several hundred µs of CPU per request; this, a few tens). Its CPU is measured too.
`WaitSampler` samples what PostgreSQL's backends are doing (pg_stat_activity) every few milliseconds:
running, waiting on a lock, on the WAL, or idle waiting for a client.

Run on its own, it drives one `agentd run` (SQLite files, the offline model, one webhook agent) and says
what a turn over HTTP costs: turns/s, latency, and the daemon's CPU per turn (the figure that holds on a
busy machine). `--configs` runs the same load on uvicorn's pure-Python defaults (`pure`: h11 and the
asyncio loop, as without httptools and uvloop) and on `standard` (httptools and uvloop, uvicorn[standard]),
interleaved round by round in alternating order:

    python bench/http_load.py [--seconds 10] [--conversations 16] [--rounds 3] [--configs pure,standard]
    python bench/http_load.py --quick    # smoke run: 2 s, 1 round
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psycopg
from _common import (  # bench/_common.py: first, it puts the repository root on the path
    REPO,
    free_port,
    log,
    pct,
    write_results,
)
from pg_drivers import server_cpu_ns

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class HttpConnection:
    """One keep-alive HTTP/1.1 connection to 127.0.0.1:port, opened at its first request."""

    def __init__(self, port: int):
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self._reader is not None
        data = json.dumps(body).encode()
        self._writer.write(
            b"POST %s HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (path.encode(), len(data), data)
        )
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.lower().split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, await self._reader.readexactly(length)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@dataclass
class Load:
    turns: int = 0
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.wall_s if self.wall_s else 0.0


async def drive(
    ports: list[int], keys: list[str], seconds: float, rng: random.Random, agent: str, sticky: bool = False
) -> Load:
    """Every conversation sends its messages one after another, each to a random daemon (no stickiness;
    `sticky`: always the same one, as a load balancer hashing the conversation would), for `seconds`;
    all conversations at once. Any answer but 200 stops the benchmark."""
    load = Load()
    path = f"/agents/{agent}/messages"
    stop_at = time.monotonic() + seconds

    async def conversation(key: str) -> int:
        connections = {port: HttpConnection(port) for port in ports}
        home = ports[keys.index(key) % len(ports)]
        sent = 0
        try:
            while time.monotonic() < stop_at:
                body = {
                    "conversation_id": key,
                    "text": f"message {sent} of {key}: what would you say to this?",
                }
                began = time.perf_counter()
                port = home if sticky else rng.choice(ports)
                status, reply = await connections[port].post_json(path, body)
                if status != 200:
                    raise RuntimeError(f"{key}: HTTP {status}: {reply[:300]!r}")
                load.latencies_ms.append((time.perf_counter() - began) * 1e3)
                sent += 1
        finally:
            for connection in connections.values():
                connection.close()
        return sent

    cpu, began = time.process_time(), time.perf_counter()
    load.turns = sum(await asyncio.gather(*(conversation(key) for key in keys)))
    load.wall_s = time.perf_counter() - began
    load.client_cpu_s = time.process_time() - cpu
    return load


def process_cpu_s(pid: int) -> float:
    """CPU time of a process, all its threads (utime + stime from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_s() -> float:
    """CPU time every core of the machine spent busy so far, whoever used it (/proc/stat)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    del idle, iowait
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


class Meter:
    """CPU seconds over a block: each daemon, the PostgreSQL server, and the machine as a whole."""

    def __init__(self, daemons: list[int], postmaster: int):
        self.daemons, self.postmaster = daemons, postmaster
        self.cpu: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        now = {f"daemon {i + 1}": process_cpu_s(pid) for i, pid in enumerate(self.daemons)}
        now["postgres"] = server_cpu_ns(self.postmaster) / 1e9
        now["machine"] = machine_busy_s()
        return now

    def __enter__(self) -> Meter:
        self._start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._read()
        self.cpu = {name: end[name] - self._start[name] for name in end}


class WaitSampler:
    """What the database's backends are doing, sampled every `every_s` in a thread of its own:
    a Counter of "running", "idle" (waiting for its client: a daemon), or "<wait type>:<event>"."""

    def __init__(self, url: str, database: str, every_s: float = 0.01):
        self.url, self.database, self.every_s = url, database, every_s
        self.seen: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="wait-sampler", daemon=True)

    def _sample(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as db:
            while not self._stop.wait(self.every_s):
                rows = db.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity"
                    " WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    (self.database,),
                ).fetchall()
                self.samples += 1
                for state, kind, event in rows:
                    if state != "active":
                        self.seen["idle" if state == "idle" else state] += 1
                    else:
                        self.seen["running" if kind is None else f"{kind}:{event}"] += 1

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self) -> dict[str, float]:
        """Per state, the mean number of backends found in it at a sample."""
        return {state: count / max(self.samples, 1) for state, count in self.seen.most_common()}


# -- run on its own: one daemon over HTTP ----------------------------------------------------------------

AGENT = "memory: {scope: thread, compact_at_tokens: false}\nchannels: {webhook: {}}\n"
# what each configuration hides from the daemon: an import of None fails as if it were not installed, so
# uvicorn's "auto" picks h11 and agentd the asyncio loop
CONFIGS = {"pure": ("httptools", "uvloop"), "standard": (), "httptools": ("uvloop",)}
LAUNCH = (
    "import sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "from agentd.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def start_daemon(root: Path, hidden: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], int]:
    """`agentd run` in `root` (agents/, data/) on a free port, answering /healthz."""
    port = free_port()
    args = [
        sys.executable,
        "-c",
        LAUNCH,
        ",".join(hidden),
        "run",
        "--port",
        str(port),
        "--reload-interval",
        "3600",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AGENTD_MODEL", None)
    with (root / "daemon.log").open("ab") as out:
        proc = subprocess.Popen(args, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited ({proc.returncode}): see {root}/daemon.log")
            try:
                if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    return proc, port
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("the daemon did not answer in time")


def one_cell(config: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="agentd-http-"))
    (root / "agents").mkdir()
    (root / "agents" / "bench.yaml").write_text(AGENT)
    proc, port = start_daemon(root, CONFIGS[config])
    try:
        keys = [f"{config}-{i}" for i in range(args.conversations)]
        asyncio.run(drive([port], keys, 0.5, rng, "bench"))  # warm: threads opened, code paths hot
        cpu = process_cpu_s(proc.pid)
        load = asyncio.run(drive([port], keys, args.seconds, rng, "bench"))
        daemon_cpu = process_cpu_s(proc.pid) - cpu
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "config": config,
        "turns": load.turns,
        "turns_per_s": load.turns_per_s,
        "p50_ms": pct(load.latencies_ms, 50),
        "p99_ms": pct(load.latencies_ms, 99),
        "daemon_cpu_us_per_turn": 1e6 * daemon_cpu / max(load.turns, 1),
        "client_cpu_us_per_turn": 1e6 * load.client_cpu_s / max(load.turns, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2 s, 1 round")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds per cell (10; quick 2)")
    ap.add_argument("--conversations", type=int, default=16, help="conversations sending at once")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of every configuration (3; quick 1)")
    ap.add_argument("--configs", default="standard", help=f"comma-separated, of {', '.join(CONFIGS)}")
    args = ap.parse_args()
    args.seconds = args.seconds or (2.0 if args.quick else 10.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    configs = args.configs.split(",")
    rng = random.Random(5)
    cells: list[dict[str, Any]] = []
    for number in range(args.rounds):
        for config in configs if number % 2 == 0 else configs[::-1]:  # alternating order: drift falls on both
            cells.append(one_cell(config, args, rng))
            log(f"round {number + 1} {config}: {cells[-1]['turns_per_s']:.0f} turns/s")
    first = configs[0]
    print(
        f"| config | turns/s | p50 ms | p99 ms | daemon CPU µs/turn | turns/s / {first}'s | CPU / {first}'s |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    for config in configs:
        mine = [c for c in cells if c["config"] == config]
        base = [c for c in cells if c["config"] == first]

        def med(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return statistics.median(c[key] for c in mine)

        def ratio(key: str, mine: list[dict[str, Any]] = mine, base: list[dict[str, Any]] = base) -> float:
            # per round (each round ran both), then the median: the machine's drift cancels in a pair
            return statistics.median(m[key] / b[key] for m, b in zip(mine, base, strict=True))

        print(
            f"| {config} | {med('turns_per_s'):.0f} | {med('p50_ms'):.2f} | {med('p99_ms'):.2f} | "
            f"{med('daemon_cpu_us_per_turn'):.0f} | {ratio('turns_per_s'):.2f} | "
            f"{ratio('daemon_cpu_us_per_turn'):.2f} |"
        )
    print(
        f"\nmedians of {args.rounds} rounds; {args.conversations} conversations at once, {args.seconds:g} s a cell"
    )
    out = write_results("http_load", {"argv": sys.argv[1:], "cells": cells})
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
