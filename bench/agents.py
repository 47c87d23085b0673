"""Thousands of agents in one daemon: start time, memory, open files and turn latency of `agentd run`.

    python bench/agents.py                    # 100 / 1,000 / 10,000 agents, then 300 x 3,000 messages
    python bench/agents.py --quick            # smoke run: 100 agents, 40 messages; 10 x 500 messages
    python bench/agents.py --tree DIR --label before   # the same against another checkout of agentd

Each cell starts the real daemon (`python -m agentd.cli run`, the offline model, webhook over HTTP) as
a child process and reads its RSS and open descriptors from /proc. `--tree` puts another checkout first
on the child's PYTHONPATH, so two versions are measured by the same code. Markdown on stdout, progress
on stderr, raw numbers in bench/results/agents-<timestamp>.json. What each column means: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from _common import free_port, log, pct, write_results  # bench/_common.py

from agentd.messages import Message
from agentd.store.records import RunRecord, StoredMessage
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.writes import CommitTurn

HERE = Path(__file__).resolve().parent.parent
AGENT = "purpose: You answer questions.\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
LONG_AGENTS = {
    "full": "memory: {scope: thread, compact_at_tokens: false}\nchannels: {webhook: {}}\n",
    "window 20": "memory: {strategy: {kind: window, messages: 20}}\nchannels: {webhook: {}}\n",
}
START_TIMEOUT = 600.0


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) in KiB, and open descriptors, of a running process."""
    out = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


class DaemonRun:
    """`agentd run` of `tree` in `root` (agents/ and data/ there), with an optional descriptor limit."""

    def __init__(self, root: Path, tree: Path, nofile: tuple[int, int] | None):
        self.root, self.tree, self.nofile = root, tree, nofile
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Seconds from spawning the process to its first answer on /healthz (every agent loaded)."""
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        env.pop("AGENTD_MODEL", None)
        limits = self.nofile

        def set_limits() -> None:
            if limits is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)

        args = [
            sys.executable,
            "-m",
            "agentd.cli",
            "run",
            "--port",
            str(self.port),
            "--reload-interval",
            "3600",
        ]
        started = time.perf_counter()
        with (self.root / "daemon.log").open("ab") as out:
            self.proc = subprocess.Popen(
                args, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=set_limits
            )
        with httpx.Client(timeout=1.0) as client:
            while time.perf_counter() - started < START_TIMEOUT:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"the daemon exited ({self.proc.returncode}): see {self.root}/daemon.log"
                    )
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return time.perf_counter() - started
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
        raise RuntimeError("the daemon did not answer in time")

    def status(self) -> dict[str, int]:
        assert self.proc is not None
        return proc_status(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def turns(run: DaemonRun, targets: list[tuple[str, str]]) -> dict[str, Any]:
    """One webhook message per (agent, conversation), in order; latency per request, and errors."""
    took, errors = [], []
    with httpx.Client(base_url=run.url, timeout=120) as client:
        for agent, conversation in targets:
            began = time.perf_counter()
            r = client.post(f"/agents/{agent}/messages", json={"conversation_id": conversation, "text": "hi"})
            took.append(time.perf_counter() - began)
            if r.status_code != 200:
                errors.append(f"{r.status_code} {r.text[:200]}")
    return {
        "n": len(took),
        "p50_ms": statistics.median(took) * 1000,
        "p95_ms": pct(took, 95) * 1000,
        "errors": len(errors),
        "first_errors": errors[:3],
    }


@contextlib.contextmanager
def measuring(root: Path, args: argparse.Namespace, what: str, cell: dict[str, Any]) -> Iterator[DaemonRun]:
    """A daemon in `root` for one cell: a failure is recorded in the cell, the folder removed after."""
    run = DaemonRun(root, args.tree, args.nofile)
    try:
        yield run
    except RuntimeError as e:
        cell["failed"] = str(e)
        log(f"{what}: FAILED: {e}")
    finally:
        run.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def agents_cell(count: int, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"agents-{count}-", dir=args.dir))
    (root / "agents").mkdir()
    for i in range(count):
        (root / "agents" / f"a{i:05d}.yaml").write_text(AGENT)
    cell: dict[str, Any] = {"agents": count}
    with measuring(root, args, f"{count} agents", cell) as run:
        log(f"{count} agents: starting")
        cell["start_s"] = run.start()
        cell["after_start"] = run.status()
        used = rng.sample(range(count), min(count, args.turns))
        log(f"{count} agents: {len(used)} first messages")
        cell["first_turns"] = turns(run, [(f"a{i:05d}", "c1") for i in used])
        log(f"{count} agents: {args.turns} more messages")
        cell["turns"] = turns(run, [(f"a{rng.choice(used):05d}", "c1") for _ in range(args.turns)])
        cell["after_turns"] = run.status()
        run.stop()
        log(f"{count} agents: restarting")
        cell["restart_s"] = run.start()
        cell["after_restart"] = run.status()
    return cell


async def prefill(data: Path, agent: str, conversations: int, length: int) -> None:
    """`conversations` threads of `length` ~400-character messages in the agent's file."""
    executor = StoreExecutor()
    store = SqliteStore(data / f"{agent}.sqlite", executor)
    await store.open()
    words = "agent run tool call memory thread audit event model token stream result context".split()
    rng = random.Random(3)
    try:
        for c in range(conversations):
            messages = []
            for seq in range(1, length + 1):
                text = " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(60))[:400]
                message = Message.user(text, "u1") if seq % 2 else Message.assistant(text)
                messages.append(StoredMessage(seq, message, "prefill"))
            run = RunRecord(f"prefill-{c}", f"webhook:c{c}", "message", None, "ok", time.time())
            await store.write(CommitTurn(f"webhook:c{c}", None, messages, run, None, None, time.time()))
    finally:
        await store.close()
        executor.shutdown()


def long_cell(strategy: str, args: argparse.Namespace, template: Path) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="long-", dir=args.dir))
    (root / "agents").mkdir()
    (root / "agents" / "long.yaml").write_text(LONG_AGENTS[strategy])
    shutil.copytree(template, root / "data")
    cell: dict[str, Any] = {"strategy": strategy}
    with measuring(root, args, f"long ({strategy})", cell) as run:
        cell["start_s"] = run.start()
        cell["after_start"] = run.status()
        keys = [("long", f"c{c}") for c in range(args.long_conversations)]
        log(f"long ({strategy}): one message to each of {len(keys)} conversations")
        cell["first_turns"] = turns(run, keys)
        cell["after_first"] = run.status()
        log(f"long ({strategy}): and again")
        cell["turns"] = turns(run, keys)
        cell["after_turns"] = run.status()
        with httpx.Client(base_url=run.url, timeout=30) as client:
            cell["daemon"] = client.get("/agents").json().get("daemon")
    return cell


def mb(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:,.0f} MB"


def agents_table(cells: list[dict[str, Any]], label: str) -> str:
    lines = [
        f"**{label}: N agents** (offline model, webhook over HTTP)",
        "",
        "| agents | start | RSS after start | open fds | first message p50 | turn p50 / p95 | RSS after turns | "
        "open fds | restart |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        if "failed" in c and "start_s" not in c:
            lines.append(f"| {c['agents']:,} | failed: {c['failed'][:80]} |||||||")
            continue
        first, warm = c.get("first_turns", {}), c.get("turns", {})
        after = c.get("after_turns", {})
        errors = first.get("errors", 0) + warm.get("errors", 0)
        lines.append(
            f"| {c['agents']:,} | {c['start_s']:.2f} s | {mb(c['after_start'].get('VmRSS'))} | "
            f"{c['after_start']['fds']:,} | {first.get('p50_ms', float('nan')):.1f} ms | "
            f"{warm.get('p50_ms', float('nan')):.1f} / {warm.get('p95_ms', float('nan')):.1f} ms | "
            f"{mb(after.get('VmRSS'))} | {after.get('fds', '-')} | "
            + (f"{c['restart_s']:.2f} s" if "restart_s" in c else c.get("failed", "-")[:60])
            + (f" ({errors} errors)" if errors else "")
            + " |"
        )
    return "\n".join(lines)


def long_table(cells: list[dict[str, Any]], label: str, disk: int, convs: int, length: int) -> str:
    lines = [
        f"**{label}: one agent, {convs} conversations x {length:,} messages ({disk / 2**20:,.0f} MB on disk)**, "
        "one message to each, twice, default budget",
        "",
        "| memory | RSS after 1st pass | peak RSS | p50 / p95 1st pass | RSS after 2nd pass | p50 / p95 2nd pass | "
        "hot threads (entries, MB, hit rate) | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        if "failed" in c:
            lines.append(f"| {c['strategy']} | failed: {c['failed'][:80]} |||||||")
            continue
        first, again = c["first_turns"], c["turns"]
        hot = (c.get("daemon") or {}).get("hot_threads")
        hot_text = (
            f"{hot['entries']}, {hot['bytes'] / 2**20:,.0f} MB, {hot['hit_rate']}"
            if hot
            else "(not reported)"
        )
        lines.append(
            f"| {c['strategy']} | {mb(c['after_first']['VmRSS'])} | {mb(c['after_turns']['VmHWM'])} | "
            f"{first['p50_ms']:.1f} / {first['p95_ms']:.1f} ms | {mb(c['after_turns']['VmRSS'])} | "
            f"{again['p50_ms']:.1f} / {again['p95_ms']:.1f} ms | {hot_text} | "
            f"{first['errors'] + again['errors']} |"
        )
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["--prefill"]:  # the child that writes the long conversations
        folder, conversations, length = sys.argv[2:5]
        asyncio.run(prefill(Path(folder), "long", int(conversations), int(length)))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--counts", default="100,1000,10000", help="agent counts (comma-separated)")
    p.add_argument("--turns", type=int, default=200, help="first messages, then as many more, per cell")
    p.add_argument("--long-conversations", type=int, default=300)
    p.add_argument("--long-length", type=int, default=3000)
    p.add_argument("--skip-long", action="store_true")
    p.add_argument("--skip-agents", action="store_true")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 100 agents, 40 messages; 10 long conversations of 500",
    )
    p.add_argument("--tree", type=Path, default=HERE, help="the agentd checkout the daemon runs from")
    p.add_argument("--label", default=None, help="names the run in the tables (default: the tree's commit)")
    p.add_argument("--nofile", default=None, help="SOFT[:HARD] descriptor limit the daemon starts with")
    p.add_argument("--dir", default=None, help="where the temporary folders go")
    p.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = p.parse_args()
    if args.quick:
        args.counts, args.turns, args.long_conversations, args.long_length = "100", 40, 10, 500
    if args.nofile:
        soft, _, hard = args.nofile.partition(":")
        args.nofile = (int(soft), int(hard or soft))
    commit = subprocess.run(
        ["git", "-C", str(args.tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    label = args.label or commit or str(args.tree)
    rng = random.Random(11)
    report: dict[str, Any] = {
        "label": label,
        "tree": str(args.tree),
        "commit": commit,
        "nofile": args.nofile,
        "python": sys.version.split()[0],
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_at_start": os.getloadavg(),
    }
    out = []
    if not args.skip_agents:
        cells = [agents_cell(int(n), args, rng) for n in args.counts.split(",")]
        report["agents"] = cells
        out.append(agents_table(cells, label))
    if not args.skip_long:
        template = Path(tempfile.mkdtemp(prefix="long-data-", dir=args.dir))
        log(f"writing {args.long_conversations} x {args.long_length} messages")
        # written by the tree under test, so its schema is the one that tree knows
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--prefill",
                str(template),
                str(args.long_conversations),
                str(args.long_length),
            ],
            env={**os.environ, "PYTHONPATH": str(args.tree)},
            cwd=template,
            check=True,
        )
        disk = sum(p.stat().st_size for p in template.iterdir())
        try:
            cells = [long_cell(s, args, template) for s in LONG_AGENTS]
        finally:
            shutil.rmtree(template, ignore_errors=True)
        report["long"] = {"disk_bytes": disk, "cells": cells}
        out.append(long_table(cells, label, disk, args.long_conversations, args.long_length))
    report["load_at_end"] = os.getloadavg()
    print("\n\n".join(out))
    path = write_results("agents", report, indent=2)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
