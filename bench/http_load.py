"""A load generator over HTTP and the meters around it, for benchmarks of `agentd run` processes.

    load = await drive([port1, port2], keys, seconds=5)      # each message to a random daemon
    with Meter(daemon_pids, postmaster_pid) as meter: ...   # CPU of each process over the block

The client is a bare HTTP/1.1 keep-alive connection on asyncio streams, not httpx: at thousands of
requests a second on a 2-core machine the load generator's own CPU must stay small next to the
daemons' (httpx costs several hundred µs of CPU per request; this, a few tens). Its CPU is measured too.
`WaitSampler` samples what PostgreSQL's backends are doing (pg_stat_activity) every few milliseconds:
running, waiting on a lock, on the WAL, or idle waiting for a client.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
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
