"""`agentd store copy`'s rules, on real agent files and a throwaway PostgreSQL server: a different row
refuses the agent and changes nothing, a row deleted in the database stays deleted, ids keep their
order and distances, files that cannot be copied are reported, verification reads every row back."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.cli import main
from agentd.providers.embedders import HashEmbedder
from agentd.store.base import write_one
from agentd.store.copy import copy_folder
from agentd.store.folder_lock import DataFolderLock
from agentd.store.postgres import PostgresBackend
from agentd.store.queries import ActiveThread, EpisodePartitions, Episodes, Memories, Runs
from agentd.store.records import NewEpisode
from agentd.store.sqlite.migrations import MIGRATIONS, migrate
from agentd.store.writes import DeleteConversation, DeleteMemory, EnsureIdentity, InsertEpisodes
from testkit.postgres import PostgresServer, free_port
from tests.support import Harness, say

REMEMBERS = "memory: {scope: thread, persistent: true}\n"
EPISODIC = "memory: {strategy: {kind: episodic, top_k: 3}}\n"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """The data folder of the agents' SQLite files."""
    return tmp_path / "data"


def seed(
    data: Path, name: str, yaml_text: str, talk: list[tuple[str, str]], *, url: str | None = None
) -> None:
    """Agent `name` says each (conversation, text), on SQLite files in `data` (or in the database)."""

    async def go() -> None:
        harness = Harness(data, store_url=url)
        try:
            agent = await harness.agent(yaml_text, name, embedder=HashEmbedder(64))
            for key, text in talk:
                await say(agent, f"webhook:{key}", "ana")(text)
                assert await agent.drain(5)
        finally:
            await harness.close()

    asyncio.run(go())


def copy(data: Path, url: str, *more: str) -> int:
    return main(
        ["store", "copy", "--to", url, "--data", str(data), "--agents", str(data.parent / "agents"), *more]
    )


def copied(data: Path, url: str, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str, str]:
    """Copy (again): the exit code and what this copy printed to stdout and stderr."""
    capsys.readouterr()
    code = copy(data, url, *more)
    out, err = capsys.readouterr()
    return code, out, err


def memories(url: str, name: str) -> list[tuple[str, str]]:
    found = in_database(url, name, lambda s: s.read(Memories()))
    return [(m["key"], m["value"]) for m in found]


def active_thread(url: str, name: str, key: str) -> int | None:
    thread = in_database(url, name, lambda s: s.read(ActiveThread(key)))
    return thread.id  # type: ignore[no-any-return]


def in_database(url: str, name: str, job: Any) -> Any:
    """`job(store)` on agent `name`'s rows in the database (a daemon's view of them)."""

    async def go() -> Any:
        async with PostgresBackend(url, daemon="test") as backend:
            store = backend.store(name)
            await store.open()
            return await job(store)

    return asyncio.run(go())


async def identity_of(store: Any) -> dict[str, str]:
    [identity] = await store.write(EnsureIdentity({}))  # (adds nothing: answers what the identity is)
    return identity  # type: ignore[no-any-return]


async def episode_ids(store: Any) -> list[int]:
    partitions = await store.read(EpisodePartitions())
    found = await store.read_many(*(Episodes(p) for p in partitions))
    return sorted(e.id for listed in found for e in listed)


def sql(path: Path, statement: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, params)
    conn.close()


def test_a_different_row_refuses_the_agent_naming_table_and_key_and_changes_nothing(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "remember city: Lisbon"), ("c1", "hello")])
    seed(data, "other", REMEMBERS, [("c1", "hi")])
    assert copy(data, postgres_url) == 0
    capsys.readouterr()
    # the file moves on without the database: a memory changed there, a message added
    sql(
        data / "bot.sqlite",
        "UPDATE memories SET value = 'Porto', updated_at = updated_at + 1 WHERE key = 'city'",
    )
    seed(data, "bot", REMEMBERS, [("c2", "a new conversation")])

    assert copy(data, postgres_url) == 1
    out = capsys.readouterr().out
    assert (
        "bot: refused, nothing of it copied: memories (scope '', key 'city'): the file's row changed since it was "
        "copied (value, updated_at differ)"
    ) in out
    assert "Porto" not in out and "Lisbon" not in out  # keys and columns, never values
    assert (  # and how to recover (issue 17, item 24)
        "bot: to recover: the file and the database were both written after the first copy; either keep the "
        "database"
    ) in out and "then `agentd store copy bot` again" in out
    assert "other: nothing new: all " in out
    assert memories(postgres_url, "bot") == [("city", "Lisbon")]
    # nothing else of bot's file came either (one transaction): not the new conversation
    assert active_thread(postgres_url, "bot", "webhook:c2") is None


def test_rows_the_database_changed_since_are_kept_and_both_sides_changing_refuses(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "remember city: Lisbon")])
    assert copy(data, postgres_url) == 0
    seed(data.parent / "elsewhere", "bot", REMEMBERS, [("c1", "remember city: Porto")], url=postgres_url)
    code, out, err = copied(data, postgres_url, capsys)
    assert code == 0  # the file holds what was copied: nothing of it is newer
    assert "  bot: memories              1 in the file: 0 copied, 0 already there, 1 changed in the" in err
    assert "bot: nothing new: " in out and memories(postgres_url, "bot") == [("city", "Porto")]

    sql(data / "bot.sqlite", "UPDATE memories SET value = 'Faro' WHERE key = 'city'")
    assert copy(data, postgres_url) == 1
    assert (
        "bot: refused, nothing of it copied: memories (scope '', key 'city'): the row changed both in the file "
        "and in the database since it was copied (value, updated_at, run_id differ)"
    ) in capsys.readouterr().out

    # a row a daemon there wrote (never copied) that the file holds differently
    seed(data, "bot3", REMEMBERS, [("c1", "remember city: Lisbon")])
    seed(data.parent / "elsewhere", "bot3", REMEMBERS, [("c2", "remember city: Porto")], url=postgres_url)
    assert copy(data, postgres_url, "bot3") == 1
    assert (
        "memories (scope '', key 'city'): the database holds a different row, not copied from this file "
        "(value, created_at, updated_at, run_id differ)"
    ) in capsys.readouterr().out


def test_rows_deleted_in_the_database_since_stay_deleted(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "remember city: Lisbon"), ("c2", "hello"), ("c2", "again")])
    assert copy(data, postgres_url) == 0

    async def forget(store: Any) -> None:  # what a daemon on the database did since
        await store.write(
            DeleteMemory("", "city"), DeleteConversation("bot", "webhook:c2", "test", time.time())
        )

    in_database(postgres_url, "bot", forget)
    code, _, err = copied(data, postgres_url, capsys)
    assert code == 0 and memories(postgres_url, "bot") == []
    for line in (
        "memories              1 in the file: 0 copied, 0 already there, 1 deleted in the database",
        "messages              8 in the file: 0 copied, 4 already there, 4 deleted in the database",
    ):
        assert f"  bot: {line} since (left deleted)" in err
    assert active_thread(postgres_url, "bot", "webhook:c2") is None


def test_an_agent_that_started_in_the_database_first(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "hello")])
    file_created = (
        sqlite3.connect(data / "bot.sqlite")
        .execute("SELECT value FROM identity WHERE key = 'created_at'")
        .fetchone()[0]
    )
    seed(
        data.parent / "elsewhere", "bot", REMEMBERS, [("c2", "hi there")], url=postgres_url
    )  # a daemon there
    assert copy(data, postgres_url) == 0
    identity = in_database(postgres_url, "bot", identity_of)
    assert identity["created_at"] == file_created  # the earlier: the agent existed since then
    assert active_thread(postgres_url, "bot", "webhook:c2") is not None

    # a conversation both talked in has two active threads: refused
    seed(data.parent / "elsewhere", "bot2", REMEMBERS, [("c1", "me too")], url=postgres_url)
    seed(data, "bot2", REMEMBERS, [("c1", "hello")])
    capsys.readouterr()
    assert copy(data, postgres_url, "bot2") == 1
    out = capsys.readouterr().out
    assert (
        "bot2: refused, nothing of it copied: threads (id 1): conversation 'webhook:c1' already has an active"
        in out
    )


def test_ids_keep_their_order_and_distances_and_the_sequences_move_past_them(
    data: Path, postgres_url: str
) -> None:
    for name in ("a", "b"):
        seed(data, name, EPISODIC, [("c1", f"fact number {i} about {name}") for i in range(5)])
    sql(data / "a.sqlite", "DELETE FROM episodes WHERE id IN (2, 3)")
    assert copy(data, postgres_url) == 0

    def ids(name: str) -> list[int]:
        return in_database(postgres_url, name, episode_ids)  # type: ignore[no-any-return]

    a, b = ids("a"), ids("b")
    assert [i - a[0] for i in a] == [0, 3, 4]  # the file's 1, 4, 5
    assert [i - b[0] for i in b] == [0, 1, 2, 3, 4] and not set(a) & set(b)

    async def insert_one(store: Any) -> list[int]:
        [partition] = await store.read(EpisodePartitions())
        return await write_one(
            store, InsertEpisodes([NewEpisode(partition, "webhook:c1", "later", time.time())])
        )

    assert in_database(postgres_url, "a", insert_one)[0] > max(a + b)


def test_runs_started_at_one_time_keep_the_files_order(data: Path, postgres_url: str) -> None:
    seed(data, "bot", REMEMBERS, [("c1", f"message {i}") for i in range(6)])
    sql(data / "bot.sqlite", "UPDATE runs SET started_at = 1700000000.0")
    assert copy(data, postgres_url) == 0

    async def on_sqlite() -> list[dict[str, Any]]:
        harness = Harness(data)
        try:
            return await (await harness.agent(REMEMBERS, "bot")).state.store.read(Runs(None, 100))
        finally:
            await harness.close()

    on_file = asyncio.run(on_sqlite())
    copied = in_database(postgres_url, "bot", lambda s: s.read(Runs(None, 100)))
    assert [r["id"] for r in copied] == [r["id"] for r in on_file]


def test_files_that_cannot_be_copied_are_reported_and_the_others_copied(
    data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "good", REMEMBERS, [("c1", "hello")])
    (data / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    future = sqlite3.connect(data / "future.sqlite")
    migrate(future, [*MIGRATIONS, ("9999_from_the_future", ("CREATE TABLE future (x)",))])
    future.close()
    old = sqlite3.connect(data / "old.sqlite", isolation_level=None)
    migrate(old, MIGRATIONS[:3])
    old.execute(
        "INSERT INTO memories (scope, key, value, created_at, updated_at) VALUES ('', 'k', 'v', 1, 1)"
    )
    old.execute(  # an event from before the chain: sealed when the file is migrated, then copied so
        "INSERT INTO audit (ts, agent, kind, action, data) VALUES (1, 'old', 'memory', 'write', '{\"key\": \"k\"}')"
    )
    old.close()

    assert copy(data, postgres_url) == 1
    out = capsys.readouterr().out
    assert "good: copied " in out
    assert "junk: refused, nothing of it copied: cannot read " in out
    assert "future: refused, nothing of it copied: " in out and "9999_from_the_future are unknown" in out
    assert "future: to recover: the file was written by a newer agentd: copy it with that version" in out
    assert "junk: to recover: check that the file is an agentd SQLite file" in out
    assert (
        "old: copied 2 rows, 0 already there; every table verified (row counts and sha256 of the rows) "
        in out
    )
    assert (
        "(its file migrated first: 0004_daemon_columns, 0005_approvals, 0006_audit_chain, 0010_media)" in out
    )
    assert "old: audit events 1..1 chained as in the file; head 1 " in out
    assert "2 of 4 agent(s) into postgresql://" in out
    assert memories(postgres_url, "old") == [("k", "v")]


def test_verification_reads_every_row_back(
    data: Path, postgres_server: PostgresServer, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "remember city: Lisbon")])
    seed(data, "other", REMEMBERS, [("c1", "hi")])
    assert copy(data, postgres_url, "other") == 0  # (the database is migrated)
    database = postgres_url.rsplit("/", 1)[1]
    # something in the database changes rows as they are written (a trigger someone left behind)
    postgres_server.psql(
        "CREATE FUNCTION agentd.shout() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN NEW.value := upper(NEW.value); RETURN NEW; END $$;"
        " CREATE TRIGGER shout BEFORE INSERT ON agentd.memories FOR EACH ROW EXECUTE FUNCTION agentd.shout()",
        database=database,
    )
    capsys.readouterr()
    assert copy(data, postgres_url, "bot") == 1
    out = capsys.readouterr().out
    assert (
        "bot: refused, nothing of it copied: agent bot: memories: 1 of 1 rows read back differ from what was "
        "written; nothing of this agent was copied"
    ) in out
    assert (
        postgres_server.psql(
            "SELECT count(*) FROM agentd.agents WHERE name = 'bot'", database=database
        ).strip()
        == "0"
    )


def test_two_copies_at_once_take_turns(data: Path, postgres_url: str) -> None:
    seed(data, "bot", REMEMBERS, [("c1", f"message {i}") for i in range(10)])
    results: list[Any] = []
    copies = [
        threading.Thread(target=lambda: results.append(copy_folder(data, postgres_url))) for _ in range(2)
    ]
    for t in copies:
        t.start()
    for t in copies:
        t.join()
    first, second = sorted((r[0] for r in results), key=lambda r: r.copied)
    assert first.copied == 0 and first.already == second.copied > 0 and first.refused is None


def test_the_command_line(data: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed(data, "bot", REMEMBERS, [("c1", "hello")])
    (data.parent / "agents").mkdir()
    assert main(["store", "copy", "--data", str(data), "--agents", str(data.parent / "agents")]) == 1
    assert "say which database to copy into: --to postgresql://" in capsys.readouterr().err
    assert copy(data, postgres_url, "nobody") == 1
    assert f"no data file for nobody in {data}" in capsys.readouterr().err
    assert copy(data, f"postgresql://postgres@127.0.0.1:{free_port()}/agentd") == 1
    assert "agentd: postgresql://127.0.0.1:" in capsys.readouterr().err  # (where, never who or the password)
    # the URL from agentd.yaml; a daemon holding the folder is warned about
    (data.parent / "agentd.yaml").write_text(f"store: {{url: '{postgres_url}'}}\n")
    lock = DataFolderLock(data)
    lock.acquire()
    try:
        assert main(["store", "copy", "--data", str(data), "--agents", str(data.parent / "agents")]) == 0
    finally:
        lock.release()
    out, err = capsys.readouterr()
    assert "bot: copied " in out
    assert f"warning: a daemon (pid {os.getpid()}) is running on {data}" in err
