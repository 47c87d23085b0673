"""Copying an agent's SQLite file into the PostgreSQL database (`agentd store copy`): comparing each
row of the file with what the database holds, and what to write. No SQL here:
agentd/store/copy_tables.py says which tables go and how ids are carried over,
agentd/store/sqlite/copy_out.py reads a file's tables, agentd/store/postgres/copy_in.py writes and
verifies one agent's rows in one transaction, agentd/store/copy.py does it for a data folder.

**Copying again.** Each copied row's key in the file (its id, or its natural key: a run's id, a
memory's scope and key, a message's thread and seq) is recorded in the database (`copied_rows`),
with the id it got and a fingerprint of the row as copied. Copying again compares each row of the
file with the one it became: the same is "already there"; one the database changed since while the
file's is as it was copied is kept as the database has it (nothing of the file is newer); one the
file changed since refuses the agent, naming the table, the key, which side changed and the columns
that differ (never their values), and nothing of that agent is written; a row deleted in the
database since (a forgotten memory, a deleted conversation, an erased person's episodes) stays
deleted. A row never copied whose natural key the database already holds (written there by a
daemon) counts as already there when it is the same and refuses when it differs, but for the
agent's `created_at` identity, which becomes the earlier of the two (the agent existed since then).

**Verifying.** Once an agent's rows are written, before its transaction commits, each table is read
back: the rows the file's rows became must be there, as many as the file holds (less those deleted
in the database since), each equal to what was expected column by column; a SHA-256 of each side's
rows is reported beside the counts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentd.errors import OperatorError
from agentd.store.copy_chain import ChainCopy
from agentd.store.copy_tables import EPISODES, THREADS, Refs, Row, Table

Allocate = Callable[[Sequence[int]], dict[int, int]]  # the file's ids -> new ids, order and distances kept


class CopyRefused(OperatorError):
    """The database holds a different row under a key of the file: nothing of the agent was copied."""


@dataclass(frozen=True, slots=True)
class Placed:
    """A row of the file as the database is to hold it."""

    source_key: str  # its key in the file, as copied_rows records it
    source_id: int | None  # a numbered row's id in the file
    row: Row  # the table's stored columns
    key: Row  # a natural key as the database holds it (thread ids rewritten); () for numbered rows
    links: Row = ()  # an audit event's place in the file's chain (seq, prev_hash, hash)


def key_text(values: Iterable[Any]) -> str:
    return json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))


def place(table: Table, values: Row, refs: Refs) -> Placed | None:
    """The database's version of a row of the file; None when its thread was deleted in the database
    since an earlier copy (the row went with it)."""
    row = dict(zip(table.columns, values, strict=True))
    source_key = key_text(row[c] for c in table.key)
    for column in table.threads:
        if row[column] is None:
            continue
        mapped = refs.thread(row[column])
        if column in table.key and (mapped is None or mapped not in refs.live_threads):
            return None
        row[column] = mapped
    for column in table.flags:
        row[column] = bool(row[column])
    if table.rewrite is not None:
        table.rewrite(row, refs)
    source_id = row["id"] if table.numbered else None
    key = () if table.numbered else tuple(row[c] for c in table.key)
    links = tuple(row[c] for c in table.linked)
    return Placed(source_key, source_id, tuple(row[c] for c in table.stored), key, links)


def describe_key(table: Table, source_key: str) -> str:
    """A row's key in the file, for a message: `memories (scope '', key 'city')`."""
    values = json.loads(source_key)
    names = ("id",) if table.numbered else table.key
    return f"{table.name} ({', '.join(f'{n} {v!r}' for n, v in zip(names, values, strict=True))})"


def differing(table: Table, ours: Row, theirs: Row) -> list[str]:
    return [c for c, a, b in zip(table.stored, ours, theirs, strict=True) if a != b]


def reconciled(table: Table, ours: Row, theirs: Row) -> Row | None:
    """The row to keep when the file's and the database's differ but may both be right, else None:
    the agent's creation time, the earlier of the two."""
    if table.name != "identity" or ours[0] != "created_at":
        return None
    try:
        return min(ours, theirs, key=lambda row: float(row[1]))
    except ValueError:
        return None


def row_digest(row: Row) -> str:
    """A row as copied, recorded beside its key: which side changed it since can then be told."""
    return hashlib.sha256(repr(row).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Copied:
    """A row copied before: the id it got (a numbered row's) and what it was then."""

    target: int | None
    row_digest: str


def digest(rows: Iterable[Row]) -> str:
    """SHA-256 over the rows in a fixed order, each as its exact Python repr (floats to the last bit)."""
    h = hashlib.sha256()
    for text in sorted(repr(row) for row in rows):
        h.update(text.encode())
        h.update(b"\n")
    return h.hexdigest()


@dataclass
class TableCopy:
    """What copying one table of one agent did."""

    table: str
    in_file: int = 0
    copied: int = 0  # written now
    already: int = 0  # in the database already, the same
    changed_since: int = 0  # copied before, changed in the database since (the file's unchanged): kept
    deleted_since: int = 0  # copied before, deleted in the database since: left deleted
    verified: int = 0  # read back after writing, equal to what the file says
    digest: str = ""  # SHA-256 of the verified rows (the same on both sides, or the copy fails)
    chain: ChainCopy | None = None  # the audit events appended to the database's chain (audit only)


@dataclass
class TablePlan:
    """What to write for one table, and what the database must then hold."""

    table: Table
    counts: TableCopy
    inserts: list[tuple[int | None, Placed]] = field(default_factory=list)  # (new id, row)
    updates: list[Placed] = field(default_factory=list)  # natural-key rows to overwrite (reconciled)
    expected: dict[Any, Row] = field(default_factory=dict)  # by the database's key: id, or natural key
    # what copied_rows is to record now: source key -> the id and the row as the database holds it
    recorded: dict[str, Copied] = field(default_factory=dict)


def plan_table(
    table: Table,
    file_rows: Sequence[Row],
    refs: Refs,
    copied: Mapping[str, Copied],
    existing: Mapping[Any, Row],
    allocate: Allocate,
) -> TablePlan:
    """Compare the file's rows with what the database holds (`existing`, by id or natural key) and
    what was copied before (`copied`, by source key); refuse on a difference neither side explains.
    `refs` learns what this table's rows became."""
    plan = TablePlan(table, TableCopy(table.name, in_file=len(file_rows)))
    placed = [place(table, values, refs) for values in file_rows]
    rows = [p for p in placed if p is not None]
    plan.counts.deleted_since = len(placed) - len(rows)
    new_ids: dict[int, int] = {}
    if table.numbered:
        new_ids = allocate(
            [p.source_id for p in rows if p.source_id is not None and p.source_key not in copied]
        )
    for p in rows:
        before = copied.get(p.source_key)
        target: int | None = None  # a numbered row's id in the database, its key there
        key: Any = p.key
        if table.numbered:
            assert p.source_id is not None
            target = key = new_ids[p.source_id] if before is None else before.target
            assert target is not None
            _learn(table, refs, p.source_id, target, live=before is None or target in existing)
        theirs = existing.get(key)
        if theirs is not None:
            _compare(plan, p, theirs, key, before)
        elif before is not None:
            plan.counts.deleted_since += 1
        else:
            plan.inserts.append((target, p))
            plan.expected[key] = p.row
        if before is None and key in plan.expected:
            plan.recorded[p.source_key] = Copied(target, row_digest(plan.expected[key]))
    plan.counts.copied = len(plan.inserts)
    if table is THREADS:
        _refuse_second_active_thread(plan, existing)
    return plan


def _compare(plan: TablePlan, p: Placed, theirs: Row, key: Any, before: Copied | None) -> None:
    """The file's row meets the database's under one key: the same; changed in the database since it
    was copied (kept); reconciled (the agent's creation time); or refused, saying which side moved."""
    table = plan.table
    plan.expected[key] = theirs
    if theirs == p.row:
        plan.counts.already += 1
        return
    if before is not None and before.row_digest == row_digest(p.row):
        plan.counts.changed_since += 1  # the file holds what was copied: nothing of it is newer
        return
    kept = reconciled(table, p.row, theirs)
    if kept is not None:
        plan.expected[key] = kept
        if kept == theirs:
            plan.counts.already += 1
        else:
            plan.updates.append(p)
            plan.recorded[p.source_key] = Copied(before.target if before else None, row_digest(kept))
        return
    if before is None:
        why = "the database holds a different row, not copied from this file"
    elif before.row_digest == row_digest(theirs):
        why = "the file's row changed since it was copied"
    else:
        why = "the row changed both in the file and in the database since it was copied"
    columns = ", ".join(differing(table, p.row, theirs))
    raise CopyRefused(f"{describe_key(table, p.source_key)}: {why} ({columns} differ)")


def _learn(table: Table, refs: Refs, source_id: int, target: int, *, live: bool) -> None:
    if table is THREADS:
        refs.threads[source_id] = target
        if live:
            refs.live_threads.add(target)
    elif table is EPISODES:
        refs.episodes[source_id] = target


def _refuse_second_active_thread(plan: TablePlan, existing: Mapping[Any, Row]) -> None:
    """A conversation has one active thread: a new one of the file must not meet one made here."""
    status = THREADS.stored.index("status")
    active_here = {row[0]: key for key, row in existing.items() if row[status] == "active"}
    for _, p in plan.inserts:
        if p.row[status] == "active" and p.row[0] in active_here:
            raise CopyRefused(
                f"{describe_key(THREADS, p.source_key)}: conversation {p.row[0]!r} already has an active "
                f"thread in the database (id {active_here[p.row[0]]}) that was not copied from this file"
            )
