"""`agentd store copy` carries the daemon's budgets' counters and usage days into PostgreSQL: what a
person spent on SQLite today still counts against today's limit on the database, and `agentd usage`
there reads the same days. A second copy adds nothing twice."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentd.store.budget_queries import SpendOf, UsageRows
from tests.test_person_data import MemoryEcho, daemon_on
from tests.test_person_links import on_slack, say, write_folder
from tests.test_store_copy_links import copy

BUDGETS = 'budgets:\n  - {per: person, limit: "1M tokens/day"}\n'


async def test_spend_and_usage_made_on_sqlite_count_on_postgresql_after_the_copy(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite_root, pg_root = tmp_path / "sqlite", tmp_path / "pg"
    write_folder(sqlite_root, None, BUDGETS)
    model = MemoryEcho()
    today = datetime.now(UTC).date().isoformat()
    async with daemon_on(sqlite_root, model) as (daemon, _):
        await say(daemon, on_slack("hello there"))
        await say(daemon, on_slack("and again"))
        assert daemon.daemon_store is not None
        usage = await daemon.daemon_store.read(UsageRows(today, today))
    assert usage and sum(r.calls for r in usage) >= 2
    with sqlite3.connect(sqlite_root / "data" / "_daemon.sqlite") as db:
        counters = db.execute("SELECT budget, subject, period, used FROM budget_spend").fetchall()
    assert counters and all(used > 0 for *_, used in counters)

    write_folder(pg_root, postgres_url, BUDGETS)
    assert await asyncio.to_thread(copy, sqlite_root, postgres_url) == 0
    capsys.readouterr()
    async with daemon_on(pg_root, model) as (daemon, _):
        assert daemon.daemon_store is not None
        assert await daemon.daemon_store.read(UsageRows(today, today)) == usage
        keys = [(b, s, p) for b, s, p, _ in counters]
        assert await daemon.daemon_store.read(SpendOf(keys)) == [used for *_, used in counters]

    assert await asyncio.to_thread(copy, sqlite_root, postgres_url) == 0  # again: nothing twice
    async with daemon_on(pg_root, model) as (daemon, _):
        assert daemon.daemon_store is not None
        assert await daemon.daemon_store.read(UsageRows(today, today)) == usage
