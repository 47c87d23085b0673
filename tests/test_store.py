"""The agent's SQLite file: created private, WAL, migrated by name, group-committed writes."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from pathlib import Path

import pytest

from agentd.errors import StoreError
from agentd.store.db import AgentStore, StoreExecutor, connect
from agentd.store.migrations import MIGRATIONS, applied, migrate


@pytest.fixture
async def store(tmp_path: Path):
    executor = StoreExecutor()
    s = AgentStore(tmp_path / "agent.sqlite", executor)
    await s.open()
    yield s
    await s.close()
    executor.shutdown()


async def test_file_is_private_and_in_wal_mode(store: AgentStore) -> None:
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    mode = await store.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
    assert mode == "wal"
    tables = await store.read(
        lambda c: {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    )
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
    with pytest.raises(RuntimeError, match="newer agentd"):
        migrate(conn)


async def test_concurrent_writes_share_commits_and_a_failing_job_fails_alone(store: AgentStore) -> None:
    def insert(i: int):
        def job(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO identity (key, value) VALUES (?, ?)", (f"k{i}", str(i)))
            if i == 7:
                raise ValueError("job 7 refuses")
            return i

        return job

    results = await asyncio.gather(*(store.write(insert(i)) for i in range(20)), return_exceptions=True)
    assert isinstance(results[7], ValueError)
    assert [r for i, r in enumerate(results) if i != 7] == [i for i in range(20) if i != 7]
    keys = await store.read(lambda c: {r[0] for r in c.execute("SELECT key FROM identity")})
    assert "k7" not in keys and {f"k{i}" for i in range(20) if i != 7} <= keys


async def test_sql_errors_become_store_errors(store: AgentStore) -> None:
    with pytest.raises(StoreError):
        await store.write(lambda c: c.execute("INSERT INTO nowhere VALUES (1)"))
    with pytest.raises(StoreError):
        await store.read(lambda c: c.execute("SELECT * FROM nowhere"))


async def test_a_lone_failing_job_leaves_nothing_behind(store: AgentStore) -> None:
    def job(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO identity (key, value) VALUES ('half', 'done')")
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await store.write(job)
    assert (
        await store.read(
            lambda c: c.execute("SELECT COUNT(*) FROM identity WHERE key = 'half'").fetchone()[0]
        )
        == 0
    )
    assert await store.write(lambda c: c.execute("SELECT 1").fetchone()[0]) == 1  # and the file still works
