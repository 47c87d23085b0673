"""The migrated schemas hold what `agentd store copy` copies (agentd/store/copy_tables.py), no more, no less;
and the two backends' SQL modules mirror each other.

A column added by a migration but unknown to the copy would be left behind by every copy, silently;
one the copy names but a migration never made breaks every copy. The copy takes the columns of a
record stored as a row from its RowShape (agentd/store/records.py), and lists the others; this reads
both backends' blank-migrated schemas and compares. What one side holds and the copy does not is
listed here, with the reason.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping
from pathlib import Path

import pytest

from agentd.store.copy_tables import TABLES
from agentd.store.postgres import dispatch as postgres_dispatch
from agentd.store.postgres.connection import SCHEMA, connect
from agentd.store.postgres.migrations import migrate as migrate_database
from agentd.store.records import APPROVAL_ROW, RUN_ROW, ApprovalRecord, RowShape, RunRecord
from agentd.store.sqlite import dispatch as sqlite_dispatch
from agentd.store.sqlite.migrations import migrate as migrate_file
from agentd.store.sqlite.store import connect as connect_file

Columns = Mapping[str, set[str]]

# Tables a backend keeps that are not copied, and why.
FILE_ONLY_TABLES: Mapping[str, str] = {
    "schema_migrations": "the file's own migrations",
    "audit_chain": "the file's chain head: copied events are appended to the database's chain",
    "episodes_fts": "the keyword index (and its shadow tables below), made from episodes.text",
    "episodes_fts_config": "the keyword index",
    "episodes_fts_data": "the keyword index",
    "episodes_fts_docsize": "the keyword index",
    "episodes_fts_idx": "the keyword index",
    "person_links": "accounts linked into people: daemon-wide (the _daemon file), not an agent's rows",
    "link_codes": "one-time /link codes, valid for minutes",
    "people_version": "a counter that moves with every link (a cache's check)",
}
DATABASE_ONLY_TABLES: Mapping[str, str] = {
    "schema_migrations": "the database's own migrations",
    "agents": "one row per agent, made when its store first opens",
    "audit_chains": "each agent's chain head, moved as copied events are appended",
    "claim_tickets": "conversation leases among daemons",
    "leases": "singleton leases among daemons",
    "copied_rows": "what `store copy` copied, to copy again without duplicates",
    "episode_partitions": "change counters of the vector indexes' catch-up",
    "episode_deletions": "deleted episode ids listed for the vector indexes' catch-up",
    "person_links": "accounts linked into people: daemon-wide, not an agent's rows",
    "link_codes": "one-time /link codes, valid for minutes",
    "people_version": "a counter that moves with every link (a cache's check)",
    "stop_asks": "a /stop asked of the daemon running the turn, answered within seconds",
}
# Columns one side holds and the copy does not, and why.
FILE_ONLY_COLUMNS: Mapping[tuple[str, str], str] = {
    ("messages", "id"): "the file's row number; rows are keyed by (thread_id, seq)",
}
DATABASE_ONLY_COLUMNS: Mapping[tuple[str, str], str] = {
    **{(table.name, "agent_id"): "whose row it is (a file holds one agent)" for table in TABLES},
    ("runs", "n"): "insert order (the file's rowid)",
    ("threads", "version"): "moved by compaction, archive and reset: what a claim reports",
    ("threads", "layers_version"): "moved by every memory_state write: what a claim reports",
    ("episodes", "change"): "the partition's change counter when the row was written or embedded",
    ("episodes", "words"): "the keyword index's tsvector, generated from text",
}


def copied() -> Columns:
    return {table.name: set(table.columns) for table in TABLES}


def unlisted(
    found: Columns, only_tables: Mapping[str, str], only_columns: Mapping[tuple[str, str], str]
) -> list[str]:
    """What `found` and the copy disagree on, less what is listed: "table" or "table.column"."""
    wanted = copied()
    out = [name for name in found.keys() - wanted.keys() if name not in only_tables]
    out += [name for name in wanted.keys() - found.keys()]
    for name in found.keys() & wanted.keys():
        out += [f"{name}.{c}" for c in found[name] - wanted[name] if (name, c) not in only_columns]
        out += [f"{name}.{c}" for c in wanted[name] - found[name]]
    return sorted(out)


def file_columns(conn: sqlite3.Connection) -> Columns:
    names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {name: {row[1] for row in conn.execute(f"PRAGMA table_info({name})")} for name in names}


def migrated_file(path: Path) -> sqlite3.Connection:
    conn = connect_file(path)
    migrate_file(conn)
    return conn


def test_a_migrated_file_holds_what_the_copy_copies(tmp_path: Path) -> None:
    conn = migrated_file(tmp_path / "bot.db")
    try:
        assert unlisted(file_columns(conn), FILE_ONLY_TABLES, FILE_ONLY_COLUMNS) == []
    finally:
        conn.close()


def test_a_column_the_copy_does_not_know_is_found(tmp_path: Path) -> None:
    conn = migrated_file(tmp_path / "bot.db")
    try:
        conn.execute("ALTER TABLE approvals ADD COLUMN note TEXT")
        conn.execute("CREATE TABLE reminders (id INTEGER PRIMARY KEY, text TEXT)")
        found = file_columns(conn)
    finally:
        conn.close()
    assert unlisted(found, FILE_ONLY_TABLES, FILE_ONLY_COLUMNS) == ["approvals.note", "reminders"]
    del found["facts"]
    found["runs"].discard("daemon")
    assert unlisted(found, FILE_ONLY_TABLES, FILE_ONLY_COLUMNS) == [
        "approvals.note",
        "facts",
        "reminders",
        "runs.daemon",
    ]


def test_a_migrated_database_holds_what_the_copy_copies(postgres_url: str) -> None:
    with connect(postgres_url) as conn:
        migrate_database(conn)
        found: dict[str, set[str]] = {}
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %s",
            (SCHEMA,),
        ):
            found.setdefault(table, set()).add(column)
    assert len(found) > len(TABLES)
    assert unlisted(found, DATABASE_ONLY_TABLES, DATABASE_ONLY_COLUMNS) == []


def test_each_query_and_write_is_answered_by_modules_of_the_same_name_in_both_backends() -> None:
    """One module per section of queries.py and writes.py, named alike in store/sqlite/ and
    store/postgres/ and listed in each dispatch.py's MODULES: what one backend answers in
    `episodes`, the other answers in `episodes` too."""

    def short(name: str) -> str:
        return name.rsplit(".", 1)[1]

    names = [short(m.__name__) for m in sqlite_dispatch.MODULES]
    assert names == [short(m.__name__) for m in postgres_dispatch.MODULES] and len(set(names)) == len(names)
    assert sqlite_dispatch.HANDLERS.keys() == postgres_dispatch.HANDLERS.keys()
    for handlers, modules in (
        (sqlite_dispatch.HANDLERS, sqlite_dispatch.MODULES),
        (postgres_dispatch.HANDLERS, postgres_dispatch.MODULES),
    ):
        assert {fn.__module__ for fn in handlers.values()} == {m.__name__ for m in modules}
    moved = {
        kind.__name__: (short(fn.__module__), short(postgres_dispatch.HANDLERS[kind].__module__))
        for kind, fn in sqlite_dispatch.HANDLERS.items()
        if short(fn.__module__) != short(postgres_dispatch.HANDLERS[kind].__module__)
    }
    assert moved == {}


def test_a_row_shape_writes_and_reads_its_record_in_field_order() -> None:
    approval = ApprovalRecord(
        "a1",
        "webhook:c",
        "r1",
        "search",
        None,
        {"q": "café"},
        {"q": "[…]"},
        "webhook:u",
        ["webhook:u"],
        1.0,
        2.0,
    )
    row = APPROVAL_ROW.values(approval)
    assert APPROVAL_ROW.columns.split(", ") == [f.name for f in dataclasses.fields(ApprovalRecord)]
    assert (
        row[5:7] == ('{"q":"café"}', '{"q":"[…]"}') and row[-1] is None
    )  # (compact, as written; NULL state)
    assert APPROVAL_ROW.record_of(row) == approval
    assert APPROVAL_ROW.marks("%s") == ", ".join(["%s"] * 15)
    run = RUN_ROW.record_of(RUN_ROW.values(RunRecord("r1", None, "message", None, "ok", 1.0), thread_id=7))
    assert (run.thread_id, run.tokens_estimated) == (7, False)
    stored = list(RUN_ROW.values(run))
    stored[RUN_ROW.names.index("tokens_estimated")] = 1  # (as SQLite holds a boolean)
    assert RUN_ROW.record_of(stored).tokens_estimated is True
    with pytest.raises(ValueError, match="no fields"):
        RowShape(ApprovalRecord, json=("arguments",))
