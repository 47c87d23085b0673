"""Writing one agent's rows from its SQLite file into the database, then checking them: the PostgreSQL
half of `agentd store copy` (agentd/store/copy_plan.py says what is copied and what it becomes).

One transaction per agent, under an advisory lock on the agent's name, so two copies at once take
turns (the second finds everything there). Rows go in with COPY, in the file's order, so the
database numbers them as the file did (runs.n too). The daemons sharing the database learn of the
copy as of any other write: the agent's memories_version moves when memories were written, each
partition's episode counter when episodes were (the copied rows carry its new value, so every
daemon's vector index takes them in), and a thread that got rows moves its versions, so a daemon
holding it in memory reads it again at its next claim. The agent's audit events are appended to its
chain after the head (`audit_chains`, agentd/store/copy_chain.py), and the chain is walked from there
to its new head before the transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import psycopg

from agentd.errors import StoreError
from agentd.store.audit_chain import GENESIS, TRAIL_COLUMNS, ChainWalk, hex_of, stored_event
from agentd.store.copy_chain import relink
from agentd.store.copy_plan import Copied, TableCopy, TablePlan, digest, plan_table
from agentd.store.copy_tables import AUDIT, EPISODES, TABLES, Refs, Row, Table

COPY_LOCK = 0x636F7079  # "copy": pg_advisory_xact_lock(COPY_LOCK, hashtext(agent name))
THREAD_PARTS = ("messages", "summaries", "memory_state")  # what a daemon's cached thread holds
ReadTable = Callable[[Table], Sequence[Row]]


def copy_agent(
    conn: psycopg.Connection[Any], agent: str, read: ReadTable, on_table: Callable[[TableCopy], None]
) -> list[TableCopy]:
    """Copy every table of one agent (`read(table)`: the file's rows) in one transaction; a CopyRefused
    or a failed verification rolls all of it back. `conn` is in autocommit mode."""
    done: list[TableCopy] = []
    with conn.transaction():
        agent_id = _agent_id(conn, agent)
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (COPY_LOCK, agent))
        refs = Refs()
        touched: set[int] = set()
        for table in TABLES:
            if table is AUDIT:  # (the last table: what it locks, it locks last, as a daemon's batch)
                _moved_threads(conn, agent_id, touched)
            copied = _copied(conn, agent_id, table)
            plan = plan_table(
                table,
                read(table),
                refs,
                copied,
                _existing(conn, agent_id, table),
                partial(_allocate, conn, table),
            )
            links = _append_to_chain(conn, agent_id, plan) if table.linked and plan.inserts else []
            _write(conn, agent_id, plan, links)
            _record(conn, agent_id, plan, copied)
            if table.name in THREAD_PARTS:
                touched.update(p.row[table.stored.index("thread_id")] for _, p in plan.inserts)
            if table.name == "memories" and (plan.inserts or plan.updates):
                conn.execute(
                    "UPDATE agents SET memories_version = memories_version + 1 WHERE id = %s", (agent_id,)
                )
            _verify(conn, agent_id, plan, agent)
            if plan.counts.chain is not None:
                _verify_chain(conn, agent_id, agent, plan.counts.chain.after)
            on_table(plan.counts)
            done.append(plan.counts)
    return done


def _moved_threads(conn: psycopg.Connection[Any], agent_id: int, touched: set[int]) -> None:
    """A thread that got rows moves its versions: a daemon holding it in memory reads it again."""
    if touched:
        conn.execute(
            "UPDATE threads SET version = version + 1, layers_version = layers_version + 1"
            " WHERE agent_id = %s AND id = ANY(%s)",
            (agent_id, sorted(touched)),
        )


def _append_to_chain(conn: psycopg.Connection[Any], agent_id: int, plan: TablePlan) -> list[Row]:
    """Place the file's new audit events after the agent's chain head in the database, holding the
    head's row lock to the commit (a daemon appending meanwhile waits, then links after them), and
    move the head past them; the links (seq, prev_hash, hash) of each, in insert order."""
    conn.execute(
        "INSERT INTO audit_chains (agent_id, seq, head, prev) VALUES (%s, 0, %s, %s)"
        " ON CONFLICT (agent_id) DO NOTHING",
        (agent_id, GENESIS, GENESIS),
    )
    row = conn.execute(
        "SELECT seq, head FROM audit_chains WHERE agent_id = %s FOR UPDATE", (agent_id,)
    ).fetchone()
    assert row is not None
    links, chain = relink(
        plan.table, (int(row[0]), bytes(row[1])), [(p.row, p.links) for _, p in plan.inserts]
    )
    last_seq, last_prev, last_hash = links[-1]
    conn.execute(
        "UPDATE audit_chains SET seq = %s, head = %s, prev = %s WHERE agent_id = %s",
        (last_seq, last_hash, last_prev, agent_id),
    )
    plan.counts.chain = chain
    return links


def _verify_chain(conn: psycopg.Connection[Any], agent_id: int, agent: str, after: int) -> None:
    """Walk the agent's chain in the database from the event the copy appended after (from the first
    event when there was none) to its head, with `agentd audit verify`'s walk."""
    walk = ChainWalk(agent, from_start=after == 0)
    found = conn.execute(
        f"SELECT {TRAIL_COLUMNS} FROM audit WHERE agent_id = %s AND seq >= %s ORDER BY seq",  # type: ignore[arg-type]
        (agent_id, after),
    )
    for row in found:
        if not walk.feed(stored_event(row)):
            break
    head = conn.execute("SELECT seq, head FROM audit_chains WHERE agent_id = %s", (agent_id,)).fetchone()
    verdict = walk.end(None if head is None else (int(head[0]), hex_of(head[1])))
    if not verdict.ok:
        raise StoreError(
            f"agent {agent}: audit: the chain read back does not verify at event {verdict.broken}: "
            f"{verdict.reason}; nothing of this agent was copied"
        )


def _agent_id(conn: psycopg.Connection[Any], agent: str) -> int:
    row = conn.execute(
        "INSERT INTO agents (name, created_at) VALUES (%s, extract(epoch FROM now()))"
        " ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
        (agent,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _copied(conn: psycopg.Connection[Any], agent_id: int, table: Table) -> dict[str, Copied]:
    found = conn.execute(
        "SELECT source_key, target_id, row_digest FROM copied_rows WHERE agent_id = %s AND source_table = %s",
        (agent_id, table.name),
    )
    return {key: Copied(target, digest) for key, target, digest in found}


def _existing(conn: psycopg.Connection[Any], agent_id: int, table: Table) -> dict[Any, Row]:
    """The agent's rows of `table` in the database: by id (a numbered table), else by natural key."""
    columns = ", ".join(table.stored)
    if table.numbered:
        found = conn.execute(f"SELECT id, {columns} FROM {table.name} WHERE agent_id = %s", (agent_id,))  # type: ignore[arg-type]
        return {row[0]: _as_stored(row[1:]) for row in found}
    found = conn.execute(f"SELECT {columns} FROM {table.name} WHERE agent_id = %s", (agent_id,))  # type: ignore[arg-type]
    at = [table.stored.index(c) for c in table.key]
    return {tuple(row[i] for i in at): _as_stored(row) for row in found}


def _as_stored(row: Sequence[Any]) -> Row:
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)


def _allocate(conn: psycopg.Connection[Any], table: Table, ids: Sequence[int]) -> dict[int, int]:
    """New ids from the table's sequence for the file's `ids`: in their order, at their distances
    (one number drawn for every id from the lowest to the highest); the sequence is then past them."""
    if not ids:
        return {}
    low, high = min(ids), max(ids)
    drawn = conn.execute(
        "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
        (table.name, high - low + 1),
    )
    numbers = sorted(row[0] for row in drawn)
    return {i: numbers[i - low] for i in ids}


def _write(conn: psycopg.Connection[Any], agent_id: int, plan: TablePlan, links: Sequence[Row]) -> None:
    table = plan.table
    if plan.inserts:
        columns = ["agent_id", *table.stored]
        rows: list[Row] = [(agent_id, *p.row) for _, p in plan.inserts]
        if links:
            columns.extend(table.linked)
            rows = [(*row, *linked) for row, linked in zip(rows, links, strict=True)]
        if table.numbered:
            columns.insert(0, "id")
            rows = [(target, *row) for (target, _), row in zip(plan.inserts, rows, strict=True)]
        if table is EPISODES:
            columns.append("change")
            rows = _stamp_changes(conn, agent_id, rows, columns.index("partition"))
        _copy_rows(conn, table.name, columns, rows)
    for p in plan.updates:
        kept = plan.expected[p.key]
        others = [c for c in table.stored if c not in table.key]
        conn.execute(
            f"UPDATE {table.name} SET ({', '.join(others)}) = ROW({', '.join(['%s'] * len(others))})"  # type: ignore[arg-type]
            f" WHERE agent_id = %s AND {' AND '.join(f'{c} = %s' for c in table.key)}",
            (*(kept[table.stored.index(c)] for c in others), agent_id, *p.key),
        )


def _record(conn: psycopg.Connection[Any], agent_id: int, plan: TablePlan, copied: dict[str, Copied]) -> None:
    """Note in copied_rows what the file's rows became (a row recorded before and reconciled now
    gets its new fingerprint)."""
    name = plan.table.name
    fresh = [
        (agent_id, name, key, c.target, c.row_digest) for key, c in plan.recorded.items() if key not in copied
    ]
    _copy_rows(
        conn, "copied_rows", ["agent_id", "source_table", "source_key", "target_id", "row_digest"], fresh
    )
    for key, c in plan.recorded.items():
        if key in copied:
            conn.execute(
                "UPDATE copied_rows SET row_digest = %s WHERE agent_id = %s AND source_table = %s AND source_key = %s",
                (c.row_digest, agent_id, name, key),
            )


def _stamp_changes(conn: psycopg.Connection[Any], agent_id: int, rows: list[Row], at: int) -> list[Row]:
    """Move the counter of each partition the episodes go to (in sorted order, as every writer locks
    them) and stamp the rows with it (agentd/store/postgres/episodes.py says why)."""
    change: dict[str, int] = {}
    for partition in sorted({row[at] for row in rows}):
        moved = conn.execute(
            "INSERT INTO episode_partitions (agent_id, partition, change) VALUES (%s, %s, 1)"
            " ON CONFLICT (agent_id, partition) DO UPDATE SET change = episode_partitions.change + 1"
            " RETURNING change",
            (agent_id, partition),
        ).fetchone()
        assert moved is not None
        change[partition] = moved[0]
    return [(*row, change[row[at]]) for row in rows]


def _copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Sequence[Row]
) -> None:
    if not rows:
        return
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:  # type: ignore[arg-type]
        for row in rows:
            copy.write_row(row)


def _verify(conn: psycopg.Connection[Any], agent_id: int, plan: TablePlan, agent: str) -> None:
    """Read the table back: every row the file's rows became, as expected, and as many."""
    found = _existing(conn, agent_id, plan.table)
    expected = plan.expected
    matched = [found[key] for key, row in expected.items() if found.get(key) == row]
    if len(matched) != len(expected) or digest(matched) != digest(expected.values()):
        raise StoreError(
            f"agent {agent}: {plan.table.name}: {len(expected) - len(matched)} of {len(expected)} rows "
            "read back differ from what was written; nothing of this agent was copied"
        )
    plan.counts.verified = len(matched)
    plan.counts.digest = digest(matched)
