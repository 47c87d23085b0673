"""What enforcing budgets and rate limits costs a turn, on SQLite and on PostgreSQL in the same run.

    python bench/budgets.py            # full run: 3 reps, 300 sequential turns, 100 conversations x 10
    python bench/budgets.py --quick    # smoke run: 1 rep, 30 sequential turns, 100 conversations x 1

Three configurations of the same daemon (in process, the offline model, HTTP through the ASGI app):
  unmetered  no meter at all (as before budgets: no usage counted)
  usage      the default: every model call's usage counted in the daemon's store, no limits
  enforced   two budgets (per person in dollars, per agent in tokens) and a per-person rate limit,
             set high enough that nothing is refused: each turn reserves, settles and takes a token
Each is measured as turn latency (p50, p95) of sequential turns in one conversation and as turns/s
with 100 conversations at once; configurations alternate within each rep. Prints a markdown table on
stdout and writes bench/results/budgets-<timestamp>.json. Checks: every turn answered, and with
budgets the counters hold what the usage rows say.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from _common import (
    log,
    pct,
    write_results,
)  # bench/_common.py: first, it puts the repository root on the path

import agentd.daemon.daemon as daemon_module
from agentd.daemon.daemon import Daemon
from agentd.http.app import create_app
from agentd.store.budget_queries import SpendOf, UsageRows
from testkit.postgres import PostgresServer

AGENT = "model: offline/offline\nmemory:\n  scope: thread\nchannels:\n  webhook: {}\n"
ENFORCED = (
    "prices: {offline/offline: {input: 0.40, output: 1.60}}\n"
    "budgets:\n"
    '  - {per: person, limit: "$1000/day"}\n'
    '  - {per: agent, agent: bot, limit: "1000M tokens/month"}\n'
    "rate_limits: [{per: person, limit: 100000/minute}]\n"
)
CONFIGS = ("unmetered", "usage", "enforced")
REAL_METERING = daemon_module.metering_for


@asynccontextmanager
async def daemon_for(
    root: Path, config: str, store_url: str | None
) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    (root / "agents").mkdir(parents=True)
    (root / "agents" / "bot.yaml").write_text(AGENT)
    settings = (f"store: {{url: '{store_url}'}}\n" if store_url else "") + (
        ENFORCED if config == "enforced" else ""
    )
    (root / "agentd.yaml").write_text(settings)
    # unmetered: the daemon gets no meter (what agentd did before budgets)
    daemon_module.metering_for = (lambda *a, **k: (None, None)) if config == "unmetered" else REAL_METERING  # type: ignore[assignment]
    daemon = Daemon(root / "agents", root / "data", reload_interval=3600)
    await daemon.start()
    daemon_module.metering_for = REAL_METERING
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd", timeout=60
    )
    try:
        yield daemon, client
    finally:
        await client.aclose()
        await daemon.shutdown()


async def turn(client: httpx.AsyncClient, conversation: str, n: int) -> float:
    began = time.perf_counter()
    r = await client.post(
        "/agents/bot/messages",
        json={"conversation_id": conversation, "text": f"message {n}", "user_id": f"u-{conversation}"},
    )
    took = time.perf_counter() - began
    body = r.json()
    if r.status_code != 200 or body.get("error") is not None:
        raise SystemExit(f"bench/budgets.py: a turn was not answered: {r.status_code} {body}")
    return took


async def measure(root: Path, config: str, store_url: str | None, args: argparse.Namespace) -> dict[str, Any]:
    async with daemon_for(root, config, store_url) as (daemon, client):
        for n in range(5):  # warm: the agent's store open, the thread hot
            await turn(client, "warm", n)
        latencies = [await turn(client, "seq", n) for n in range(args.turns)]
        began = time.perf_counter()
        await asyncio.gather(
            *[_conversation(client, f"c{c}", args.per_conversation) for c in range(args.conversations)]
        )
        wall = time.perf_counter() - began
        calls = args.turns + 5 + args.conversations * args.per_conversation
        meter = daemon.resources.meter
        if meter is not None:
            rows = await meter.store.read(UsageRows("0000-01-01", "9999-12-31"))
            counted = sum(r.calls for r in rows)
            if counted != calls:
                raise SystemExit(f"bench/budgets.py: {counted} calls counted of {calls} ({config})")
            if config == "enforced":
                [charge] = [
                    c for c in meter.charges("bot", None, meter.clock.time()) if c.spec.per == "agent"
                ]
                [spent] = await meter.store.read(
                    SpendOf([(charge.key.budget, charge.key.subject, charge.key.period)])
                )
                tokens = sum(r.input_tokens + r.output_tokens for r in rows)
                if spent != tokens:
                    raise SystemExit(
                        f"bench/budgets.py: the agent's counter holds {spent}, its usage {tokens}"
                    )
    turns = args.conversations * args.per_conversation
    return {
        "p50_ms": pct(latencies, 50) * 1000,
        "p95_ms": pct(latencies, 95) * 1000,
        "turns_per_s": turns / wall,
        "latencies_ms": [round(x * 1000, 3) for x in latencies],
    }


async def _conversation(client: httpx.AsyncClient, conversation: str, count: int) -> None:
    for n in range(count):
        await turn(client, conversation, n)


async def run(args: argparse.Namespace, server: PostgresServer) -> dict[str, Any]:
    cells: dict[str, dict[str, list[dict[str, Any]]]] = {
        b: {c: [] for c in CONFIGS} for b in ("sqlite", "postgres")
    }
    for rep in range(args.reps):
        for backend in ("sqlite", "postgres"):
            order = CONFIGS if rep % 2 == 0 else tuple(reversed(CONFIGS))
            for config in order:
                root = Path(tempfile.mkdtemp(prefix="agentd-bench-budgets-"))
                url = server.create_database(f"b_{uuid.uuid4().hex[:12]}") if backend == "postgres" else None
                try:
                    cell = await measure(root, config, url, args)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                log(
                    f"rep {rep} {backend} {config}: p50 {cell['p50_ms']:.2f} ms, {cell['turns_per_s']:.0f} turns/s"
                )
                cells[backend][config].append(cell)
    return cells


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 rep, 30 turns, 100 conversations x 1")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--turns", type=int, default=300, help="sequential turns per cell")
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--per-conversation", type=int, default=10, help="turns of each concurrent conversation")
    args = p.parse_args()
    if args.quick:
        args.reps, args.turns, args.per_conversation = 1, 30, 1
    with PostgresServer() as server:
        cells = asyncio.run(run(args, server))
    print(
        f"turns: {args.turns} sequential; {args.conversations} conversations x {args.per_conversation} at once; "
        f"{args.reps} reps (median of the reps' p50 and turns/s)\n"
    )
    print(
        "| backend | configuration | turn p50 (ms) | best rep's p50 (ms) | turn p95 (ms) | turns/s, 100 conversations |"
    )
    print("|---|---|---:|---:|---:|---:|")
    summary: dict[str, Any] = {}
    for backend, configs in cells.items():
        for config, reps in configs.items():
            p50 = sorted(c["p50_ms"] for c in reps)[len(reps) // 2]
            p95 = sorted(c["p95_ms"] for c in reps)[len(reps) // 2]
            rate = sorted(c["turns_per_s"] for c in reps)[len(reps) // 2]
            best = min(c["p50_ms"] for c in reps)  # on a shared machine the least disturbed rep
            summary[f"{backend}/{config}"] = {
                "p50_ms": p50,
                "best_p50_ms": best,
                "p95_ms": p95,
                "turns_per_s": rate,
            }
            print(f"| {backend} | {config} | {p50:.2f} | {best:.2f} | {p95:.2f} | {rate:.0f} |")
    path = write_results(
        "budgets",
        {"kind": "budgets", "argv": sys.argv[1:], "config": vars(args), "summary": summary, "cells": cells},
    )
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
