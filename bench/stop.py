"""How long a `/stop` asked of one daemon takes to reach the daemon running the turn (issue 19), on one
PostgreSQL shared by two daemons: directly (LISTEN/NOTIFY) and behind PgBouncer in transaction mode
(no LISTEN there: both sides poll, agentd/store/postgres/stop_asks.py).

    nice python bench/stop.py            # 100 rounds a cell
    nice python bench/stop.py --quick    # 10 rounds a cell (~15 s)

A round: daemon B asks for the turn daemon A holds the claim of, A takes the ask and answers, B reads
the answer (agentd.store.stop_asks: ask → taken → answer → answer_of), in ms. The baseline, measured
in the same run on the same connections, is one read round trip of B's store (`PeopleVersion`): the
ratio says how many round trips' worth a stop's hand-over costs. Markdown on stdout, numbers to
bench/results/stop-<timestamp>.json. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

from _common import (
    log,
    pct,
    write_results,
)  # bench/_common.py: first, it puts the repository root on the path

from agentd.store.link_queries import PeopleVersion
from agentd.store.postgres import PostgresBackend
from testkit.pgbouncer import PgBouncer, find_pgbouncer
from testkit.postgres import PostgresServer

KEY = "webhook:bench"


async def measure(url: str, rounds: int, **options: Any) -> dict[str, Any]:
    async with (
        PostgresBackend(url, daemon="a", **options) as a,
        PostgresBackend(url, daemon="b", **options) as b,
    ):
        runner, asker = a.store("bot"), b.store("bot")
        await runner.open()
        await asker.open()
        if options.get("pooler") != "transaction":
            await asyncio.wait_for(a.wakeups.listening.wait(), 10)
            await asyncio.wait_for(b.wakeups.listening.wait(), 10)

        async def holder() -> None:  # daemon A's stop relay, as agentd/daemon/stop_relay.py runs it
            while True:
                for ask in await a.stop_asks.taken(30):
                    await a.stop_asks.answer(ask.id, f"run-{ask.id}")

        relay = asyncio.create_task(holder())
        floor, handover = [], []
        try:
            async with runner.claim(KEY):
                for _ in range(rounds):
                    started = time.perf_counter()
                    await asker.read(PeopleVersion())
                    floor.append((time.perf_counter() - started) * 1000)
                    started = time.perf_counter()
                    ask = await b.stop_asks.ask("bot", KEY, "api", "bench")
                    assert ask is not None, "A holds the claim: B must ask it"
                    answer = await b.stop_asks.answer_of(ask, 5)
                    assert answer is not None and answer.run_id == f"run-{ask}" and answer.daemon == "a"
                    handover.append((time.perf_counter() - started) * 1000)
        finally:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay
        return {
            "rounds": rounds,
            "read_p50_ms": pct(floor, 50),
            "stop_p50_ms": pct(handover, 50),
            "stop_p95_ms": pct(handover, 95),
            "stop_max_ms": max(handover),
            "ratio_p50": pct(handover, 50) / pct(floor, 50),
        }


def report(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| path | one read (baseline) p50 | stop handed over p50 | p95 | max | ratio p50 |",
        "|---|---|---|---|---|---|",
    ]
    for path, r in results.items():
        lines.append(
            f"| {path} | {r['read_p50_ms']:.2f} ms | {r['stop_p50_ms']:.2f} ms | {r['stop_p95_ms']:.2f} ms"
            f" | {r['stop_max_ms']:.2f} ms | {r['ratio_p50']:.1f}× |"
        )
    return "A /stop asked of daemon B, handed to daemon A running the turn\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10 rounds a cell")
    args = parser.parse_args()
    rounds = 10 if args.quick else 100
    results: dict[str, dict[str, Any]] = {}
    with PostgresServer(settings={}) as server:
        url = server.create_database("stop_bench")
        log("PostgreSQL, LISTEN/NOTIFY")
        results["PostgreSQL (LISTEN/NOTIFY)"] = asyncio.run(measure(url, rounds))
        if find_pgbouncer() is None:
            log("no pgbouncer binary: the transaction-mode cell is skipped")
        else:
            database = url.rsplit("/", 1)[1]
            server.psql(f'ALTER ROLE "postgres" IN DATABASE "{database}" SET search_path = agentd')
            with PgBouncer(server, pool_mode="transaction") as bouncer:
                log("PgBouncer, transaction mode (polled)")
                results["PgBouncer transaction mode (polled)"] = asyncio.run(
                    measure(bouncer.url(database), rounds, pooler="transaction")
                )
    print(report(results))
    log(f"wrote {write_results('stop', results, indent=2)}")


if __name__ == "__main__":
    main()
