"""The PostgreSQL backend itself: migrations, opening, errors, one agent's rows, vector index catch-up.

The contract every backend keeps is tests/test_store_contract.py; claims are tests/test_postgres_claims.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentd.config.http_store import StoreSpec
from agentd.config.models import DaemonSpec
from agentd.daemon.resources import STORE_URL_ENV, Resources
from agentd.errors import NewerSchema, StoreError
from agentd.store.base import write_one
from agentd.store.postgres import PostgresBackend, PostgresStore, episodes
from agentd.store.postgres.connection import connect
from agentd.store.postgres.migrations import MIGRATIONS, applied, migrate
from agentd.store.queries import MemoryKeys, VectorChanges
from agentd.store.records import NewEpisode
from agentd.store.writes import (
    DeletePartitionEpisodes,
    InsertEpisodes,
    PruneEpisodes,
    SetVectors,
    UpsertMemory,
)
from testkit.postgres import PostgresServer

VEC = b"\x00\x00\x80?" * 4
T0 = 1_700_000_000.0


@pytest.fixture
def fresh_db(postgres_server: PostgresServer) -> Iterator[str]:
    """The name of an empty database (for raw connections and psql)."""
    name = f"raw_{uuid.uuid4().hex[:16]}"
    postgres_server.create_database(name)
    yield name
    postgres_server.drop_database(name)


@pytest.fixture
async def backend(postgres_url: str) -> AsyncIterator[PostgresBackend]:
    async with PostgresBackend(postgres_url, daemon="d1") as b:
        yield b


async def opened(backend: PostgresBackend, agent: str = "bot", **kw: Any) -> PostgresStore:
    store = backend.store(agent, **kw)
    await store.open()
    return store


def tables(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'agentd'").fetchall()
    return {r[0] for r in rows}


# -- migrations ----------------------------------------------------------------------------------


def test_migrate_from_blank_then_nothing_to_do(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        assert migrate(conn) == [name for name, _ in MIGRATIONS]
        assert migrate(conn) == []
        assert applied(conn) == [name for name, _ in MIGRATIONS]
        assert {
            "agents",
            "threads",
            "messages",
            "runs",
            "audit",
            "episodes",
            "claim_tickets",
            "leases",
        } <= tables(conn)


def test_migrate_from_every_earlier_schema(postgres_server: PostgresServer) -> None:
    for upto in range(len(MIGRATIONS)):
        name = f"old_{upto}_{uuid.uuid4().hex[:8]}"
        url = postgres_server.create_database(name)
        try:
            with connect(url) as conn:
                migrate(conn, MIGRATIONS[:upto])
                assert migrate(conn) == [n for n, _ in MIGRATIONS[upto:]]
                assert applied(conn) == [n for n, _ in MIGRATIONS]
        finally:
            postgres_server.drop_database(name)


def test_a_failing_migration_leaves_the_database_as_it_was(postgres_url: str) -> None:
    broken = [*MIGRATIONS, ("9999_broken", ("CREATE TABLE later (x int)", "THIS IS NOT SQL"))]
    with connect(postgres_url) as conn:
        with pytest.raises(psycopg.errors.SyntaxError):
            migrate(conn, broken)
        assert applied(conn) == [n for n, _ in MIGRATIONS]  # the earlier ones stay applied
        assert "later" not in tables(conn)
        # and the migration lock was let go: another session can take it at once
        assert conn.execute("SELECT pg_try_advisory_lock(%s)", (0x61_67_65_6E_74_64,)).fetchone() == (True,)


async def test_a_database_from_a_newer_agentd_is_refused(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        migrate(conn, [*MIGRATIONS, ("9999_future", ("CREATE TABLE future (x int)",))])
    backend = PostgresBackend(postgres_url, daemon="d1")
    with pytest.raises(NewerSchema, match=r"newer agentd.*9999_future.*upgrade agentd"):
        await backend.open()
    with connect(postgres_url) as conn:
        assert applied(conn)[-1] == "9999_future"  # nothing was changed


async def test_daemons_starting_at_once_migrate_once(postgres_url: str) -> None:
    backends = [PostgresBackend(postgres_url, daemon=f"d{i}") for i in range(3)]
    try:
        results = await asyncio.gather(*(b.open() for b in backends))
    finally:
        for b in backends:
            await b.close()
    assert sorted(results, key=len) == [[], [], [n for n, _ in MIGRATIONS]]


# -- opening and errors ----------------------------------------------------------------------------


async def test_the_label_names_host_database_and_agent_never_the_password(
    postgres_server: PostgresServer, fresh_db: str
) -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{postgres_server.port}/{fresh_db}"  # (trust: ignored)
    async with PostgresBackend(url, daemon="d1") as backend:
        store = await opened(backend)
        assert store.label == f"postgresql://127.0.0.1:{postgres_server.port}/{fresh_db}#bot"
        assert "s3cret" not in store.label and store.shared


async def test_an_unreachable_database_is_a_clear_store_error() -> None:
    with socket_closed_port() as port:
        backend = PostgresBackend(f"postgresql://nobody:pw@127.0.0.1:{port}/x", daemon="d1")
        with pytest.raises(
            StoreError, match=rf"cannot open the store: postgresql://127.0.0.1:{port}/x: "
        ) as e:
            await backend.open()
    assert "nobody:pw" not in str(e.value)


@contextlib.contextmanager
def socket_closed_port() -> Iterator[int]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]  # bound, not listening: connections are refused


async def test_sql_errors_become_store_errors_and_the_store_goes_on(
    backend: PostgresBackend, postgres_server: PostgresServer, postgres_url: str
) -> None:
    store = await opened(backend)
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.psql("ALTER TABLE agentd.memories RENAME TO gone", database=database)
    with pytest.raises(StoreError, match='relation "memories" does not exist'):
        await store.write(UpsertMemory("", "k", "v", None, T0))
    with pytest.raises(StoreError, match='relation "memories" does not exist'):
        await store.read(MemoryKeys())
    postgres_server.psql("ALTER TABLE agentd.gone RENAME TO memories", database=database)
    assert await store.write(UpsertMemory("", "k", "v", None, T0)) == [True]


async def test_a_read_after_the_server_dropped_the_connection_reconnects(
    backend: PostgresBackend, postgres_server: PostgresServer, postgres_url: str
) -> None:
    store = await opened(backend)
    await store.write(UpsertMemory("", "k", "v", None, T0))
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.psql(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
        " AND application_name <> 'psql'"
    )
    for _ in range(8):  # every thread's connection was dropped: each read finds out and reconnects
        assert await store.read(MemoryKeys()) == {"": ["k"]}


async def test_a_read_only_store_reads_and_refuses_writes(backend: PostgresBackend) -> None:
    writer = await opened(backend)
    await writer.write(UpsertMemory("", "k", "v", None, T0))
    reader = await opened(backend, readonly=True)
    assert await reader.read(MemoryKeys()) == {"": ["k"]}
    with pytest.raises(StoreError, match="read-only"):
        await reader.write(UpsertMemory("", "k2", "v", None, T0))
    with pytest.raises(StoreError, match="no data for agent 'ghost'"):
        await opened(backend, "ghost", readonly=True)


def test_the_store_url_setting_takes_only_postgresql_urls() -> None:
    assert StoreSpec(url="postgresql://u@h/db").url == "postgresql://u@h/db"
    assert StoreSpec(url="").url is None  # (an unset ${AGENTD_STORE_URL:-})
    with pytest.raises(ValueError, match="expected a postgresql:// URL"):
        StoreSpec(url="mysql://u@h/db")


async def test_resources_pick_postgresql_from_the_environment(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_URL_ENV, postgres_url)
    async with Resources(DaemonSpec(), tmp_path / "data") as resources:
        store = resources.store("bot")
        assert isinstance(store, PostgresStore) and store.label.endswith("#bot")
    monkeypatch.delenv(STORE_URL_ENV)
    async with Resources(DaemonSpec(), tmp_path / "data") as resources:
        assert not resources.store("bot").shared  # SQLite files, the default
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").iterdir())


# -- a vector index catching up with other daemons' writes ------------------------------------------


async def test_vector_changes_list_what_others_wrote_embedded_and_deleted(postgres_url: str) -> None:
    async with (
        PostgresBackend(postgres_url, daemon="a") as one,
        PostgresBackend(postgres_url, daemon="b") as two,
    ):
        writer, reader = await opened(one), await opened(two)
        first = await write_one(
            writer, InsertEpisodes([NewEpisode("p", "k", "one", T0, embedder="e", vector=VEC)])
        )
        start = await reader.read(VectorChanges("p", "e", 0))
        assert [v.id for v in start.added] == first and start.change > 0
        ids = await write_one(
            writer,
            InsertEpisodes(
                [
                    NewEpisode("p", "k", "two", T0 + 1),
                    NewEpisode("p", "k", "three?", T0 + 2, embedder="e", vector=VEC),
                ]
            ),
        )
        await writer.write(SetVectors("e", [(ids[0], VEC)]))
        await writer.write(PruneEpisodes("bot", "p", 2, None, T0 + 3))  # the least important, oldest: "one"
        delta = await reader.read(VectorChanges("p", "e", start.change))
        assert ([(v.id, v.asks) for v in delta.added], delta.removed, delta.complete) == (
            [(ids[0], False), (ids[1], True)],
            first,
            True,
        )
        assert (await reader.read(VectorChanges("p", "e", delta.change))).added == []
        await writer.write(DeletePartitionEpisodes("bot", "p", "admin", T0))
        gone = await reader.read(VectorChanges("p", "e", delta.change))
        assert (gone.complete, gone.added, gone.removed) == (False, [], [])  # reload: all went
        assert (await reader.read(VectorChanges("p", "e", gone.change))).complete


async def test_deletions_listed_long_ago_are_forgotten(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(episodes, "DELETIONS_KEPT", 2)
    store = await opened(backend)
    since = (await store.read(VectorChanges("p", "e", 0))).change
    for i in range(4):
        await store.write(InsertEpisodes([NewEpisode("p", "k", f"e{i}", T0 + i, embedder="e", vector=VEC)]))
        await store.write(PruneEpisodes("bot", "p", 1, None, T0 + i))
    old = await store.read(VectorChanges("p", "e", since + 1))
    assert not old.complete  # an index that far behind reloads
    recent = await store.read(VectorChanges("p", "e", old.change - 2))
    assert recent.complete and len(recent.removed) == 1
