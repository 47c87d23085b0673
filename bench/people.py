"""What resolving each event's account to its person costs (issue 20 §1), on SQLite and PostgreSQL.

    nice python bench/people.py            # 1,000 people of two accounts; 5,000 events per cell
    nice python bench/people.py --quick    # 100 people, 500 events (~5 s)

Every event reaching an agent passes `People.resolve` (agentd/engine/linking.py): from the process's
cache of links, and on a store several daemons share (PostgreSQL) after one read of the people version
(so a link made by another daemon holds at the next message). Cells, per backend, in µs per event:

- **linked, cached**: an account of a linked person, its link in the cache;
- **not linked, cached**: an account of nobody, known to be nobody's;
- **first message**: an account never seen (the cache misses: one more query, PersonOf);
- **after a link elsewhere** (PostgreSQL only): another daemon linked someone just before each event
  (the version moved): the cache starts over, so the event pays the version read and a PersonOf.

Checks afterwards that each cell resolved what it claims (the person, or none). Markdown on stdout,
numbers to bench/results/people-<timestamp>.json. The machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _common import (
    log,
    pct,
    write_results,
)  # bench/_common.py: first, it puts the repository root on the path

from agentd.config.http_store import StoreSpec
from agentd.config.models import DaemonSpec
from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.engine.linking import People
from agentd.events import InboundEvent
from agentd.store.link_writes import LinkAccounts
from testkit.postgres import PostgresServer


def event(user: str) -> InboundEvent:
    return InboundEvent("bot", f"telegram:{user}", "hi", "telegram", user_id=user)


async def timed(
    n: int, step: Callable[[int], Awaitable[Any]], before: Callable[[int], Awaitable[Any]] | None = None
) -> list[float]:
    """µs of each of `n` calls of step(i) (`before(i)` runs first, untimed)."""
    out = []
    for i in range(n):
        if before is not None:
            await before(i)
        start = time.perf_counter()
        await step(i)
        out.append((time.perf_counter() - start) * 1e6)
    return out


async def measure(settings: DaemonSpec, root: Path, people_n: int, events: int) -> dict[str, Any]:
    async with Resources(settings, root) as resources:
        store = resources.store(DAEMON_STORE)
        await store.open()
        try:
            for i in range(people_n):  # Ana i: telegram:t<i> and slack:s<i>
                await store.write(LinkAccounts(f"p{i}", (f"telegram:t{i}", f"slack:s{i}"), "bench", 0.0))
            people = People()
            people.attach(store)
            cells: dict[str, list[float]] = {}
            for i in range(people_n):  # warm: every account once, linked or not
                await people.resolve(event(f"t{i}"))
                await people.resolve(event(f"n{i}"))

            async def linked(i: int) -> None:
                resolved = await people.resolve(event(f"t{i % people_n}"))
                assert resolved.person == f"p{i % people_n}"

            async def nobody(i: int) -> None:
                assert (await people.resolve(event(f"n{i % people_n}"))).person is None

            async def first(i: int) -> None:
                assert (await people.resolve(event(f"new{i}"))).person is None

            async def elsewhere(i: int) -> None:
                # what another daemon's link does to this one: the people version moves in the store
                await store.write(LinkAccounts(f"q{i}", (f"discord:q{i}",), "bench", 0.0))

            steps: list[tuple[str, Any, Any]] = [
                ("linked, cached", linked, None),
                ("not linked, cached", nobody, None),
                ("first message", first, None),
            ]
            if store.shared:  # one daemon per SQLite folder: no link is made elsewhere
                steps.append(("after a link elsewhere", linked, elsewhere))
            for name, step, before in steps:
                cells[name] = await timed(events, step, before)
                log(f"  {name}: p50 {pct(cells[name], 50):.0f} µs")
            return {
                "shared": store.shared,
                "cells": {
                    name: {"p50_us": pct(xs, 50), "p99_us": pct(xs, 99), "n": len(xs)}
                    for name, xs in cells.items()
                },
            }
        finally:
            await store.close()


def report(results: dict[str, dict[str, Any]]) -> str:
    names = list(dict.fromkeys(n for r in results.values() for n in r["cells"]))
    lines = ["| backend | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for backend, r in results.items():
        cells = [
            f"{r['cells'][n]['p50_us']:.0f} (p99 {r['cells'][n]['p99_us']:.0f})" if n in r["cells"] else "n/a"
            for n in names
        ]
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    return "People.resolve per event, µs p50 (p99)\n\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100 people, 500 events per cell")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args()
    people_n, events = (100, 500) if args.quick else (1_000, 5_000)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        # (started here, in the main thread, which outlives it: testkit/postgres.py)
        server = stack.enter_context(PostgresServer(settings={}))
        for backend, settings in (
            ("SQLite", DaemonSpec()),
            ("PostgreSQL", DaemonSpec(store=StoreSpec(url=server.create_database("people_bench")))),
        ):
            log(backend)
            root = Path(tmp) / backend
            root.mkdir()
            results[backend] = asyncio.run(measure(settings, root, people_n, events))
    print(report(results))
    results["config"] = {"people": people_n, "events_per_cell": events}
    log(f"wrote {write_results('people', results, indent=2)}")


if __name__ == "__main__":
    main()
