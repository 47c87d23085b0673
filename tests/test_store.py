"""The agent's SQLite file: created private, WAL, migrated by name, group-committed writes."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from pathlib import Path

import pytest

from agentd.errors import NewerSchema, StoreError
from agentd.store.queries import MemoryKeys
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.sqlite.migrations import MIGRATIONS, applied, migrate
from agentd.store.sqlite.store import connect
from agentd.store.writes import DeleteMemory, RowMissing, UpsertMemory, Write
from tests.support import sqlite_file


@pytest.fixture
async def store(tmp_path: Path):
    executor = StoreExecutor()
    s = SqliteStore(tmp_path / "agent.sqlite", executor)
    await s.open()
    yield s
    await s.close()
    executor.shutdown()


async def test_file_is_created_at_first_use_private_and_in_wal_mode(store: SqliteStore) -> None:
    assert not store.path.exists() and store.absent()  # open() touched nothing
    assert await store.read(MemoryKeys()) == {}  # the first use creates and migrates the file
    with sqlite_file(store.path) as c:
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert mode == "wal"
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert {
        "threads",
        "messages",
        "runs",
        "audit",
        "memories",
        "identity",
        "summaries",
        "inbound_events",
    } <= tables


def test_migrate_from_blank_then_nothing_to_do(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite")
    assert migrate(conn) == [name for name, _ in MIGRATIONS]
    assert migrate(conn) == []
    assert applied(conn) == [name for name, _ in MIGRATIONS]


def test_migrate_from_every_earlier_schema(tmp_path: Path) -> None:
    for upto in range(len(MIGRATIONS)):
        conn = connect(tmp_path / f"old{upto}.sqlite")
        migrate(conn, MIGRATIONS[:upto])
        assert migrate(conn) == [name for name, _ in MIGRATIONS[upto:]]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite")
    broken = [*MIGRATIONS, ("9999_broken", ("CREATE TABLE later (x)", "THIS IS NOT SQL"))]
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, broken)
    assert "9999_broken" not in applied(conn)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'later'").fetchone() is None


def test_a_file_from_a_newer_agentd_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite")
    migrate(conn, [*MIGRATIONS, ("9999_future", ("CREATE TABLE future (x)",))])
    with pytest.raises(NewerSchema, match=r"newer agentd.*9999_future.*upgrade agentd"):
        migrate(conn)


def remember(i: int) -> UpsertMemory:
    return UpsertMemory("", f"k{i}", str(i), None, float(i))


async def test_concurrent_writes_share_commits_and_a_failing_batch_fails_alone(store: SqliteStore) -> None:
    def batch(i: int) -> list[Write[object]]:
        ops: list[Write[object]] = [remember(i)]
        if i == 7:
            ops.append(DeleteMemory("", "nothing-here", must_exist=True))  # refuses: the batch rolls back
        return ops

    results = await asyncio.gather(*(store.write(*batch(i)) for i in range(20)), return_exceptions=True)
    assert isinstance(results[7], RowMissing)
    assert [r for i, r in enumerate(results) if i != 7] == [[True]] * 19
    keys = set((await store.read(MemoryKeys()))[""])
    assert "k7" not in keys and {f"k{i}" for i in range(20) if i != 7} == keys


async def test_sql_errors_become_store_errors(store: SqliteStore) -> None:
    await store.read(MemoryKeys())  # (the file exists)
    with sqlite_file(store.path) as c:
        c.execute("DROP TABLE memories")
    with pytest.raises(StoreError, match="no such table: memories"):
        await store.write(remember(1))
    with pytest.raises(StoreError, match="no such table: memories"):
        await store.read(MemoryKeys())


async def test_a_lone_failing_batch_leaves_nothing_behind(store: SqliteStore) -> None:
    with pytest.raises(RowMissing):
        await store.write(remember(1), DeleteMemory("", "nothing-here", must_exist=True))
    assert await store.read(MemoryKeys()) == {}
    assert await store.write(remember(2)) == [True]  # and the file still works


async def test_a_read_only_store_reads_and_refuses_writes(store: SqliteStore, tmp_path: Path) -> None:
    await store.write(remember(1))
    reader = SqliteStore(store.path, StoreExecutor(), readonly=True)
    await reader.open()
    try:
        assert await reader.read(MemoryKeys()) == {"": ["k1"]}
        with pytest.raises(StoreError, match="read-only"):
            await reader.write(remember(2))
    finally:
        await reader.close()
    missing = SqliteStore(tmp_path / "none.sqlite", StoreExecutor(), readonly=True)
    with pytest.raises(StoreError, match="no data file"):
        await missing.open()
    assert not (tmp_path / "none.sqlite").exists()
