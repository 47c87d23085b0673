"""What `agentd store copy` copies of an agent's SQLite file, and how what refers to a row still does
once the row is in the PostgreSQL database (agentd/store/copy_plan.py compares and plans the rows;
agentd/store/sqlite/copy_out.py reads them, agentd/store/postgres/copy_in.py writes them).

**Ids.** A file numbers its own threads, summaries, episodes and audit events from 1; in the database
those ids come from sequences every agent shares, so each such row gets a new id from its table's
sequence, in the file's order and at the file's distances (an episode's neighbours are the episodes
of its conversation a few ids away), and the sequences are then past every copied id. Whatever refers
to such a row is rewritten to its new id: messages, summaries, memory_state and runs name a thread, a
paused run's state (approvals.state) too, and an episodic layer's last recall (memory_state.data)
names episodes. A reference to a row that is no longer in the file (the thread of a deleted
conversation, in a run) becomes null. What is not a number of the file's own stays as it is: run
ids, approval ids, message seqs, keys and times.

**The audit trail** is never rewritten: the hash chain commits to every top-level key of an event's
`data` and to its conversation key (agentd/store/audit_chain.py), so an event is copied as written —
/reset's event keeps the file's number of the thread it emptied (historical, as its time is). Only
its place in the database's chain (`seq`, `prev_hash`, `hash`: the `linked` columns) is decided when
it is written, agentd/store/copy_chain.py says how.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.store.job_records import DELIVERY_ROW, FIRE_ROW, JOB_ROW
from agentd.store.records import APPROVAL_ROW, EPISODE_ROW, FACT_ROW, RUN_ROW

Row = tuple[Any, ...]


def _columns(names: str) -> tuple[str, ...]:
    return tuple(names.split())


@dataclass
class Refs:
    """What the rows copied so far became: the rows of later tables refer to them."""

    threads: dict[int, int] = field(default_factory=dict)  # the file's thread id -> the database's
    live_threads: set[int] = field(default_factory=set)  # those of them still in the database
    episodes: dict[int, int] = field(default_factory=dict)

    def thread(self, file_id: Any) -> int | None:
        return None if file_id is None else self.threads.get(file_id)


Rewrite = Callable[[dict[str, Any], Refs], None]


@dataclass(frozen=True, slots=True)
class Table:
    """One table as both backends hold it (the same name and columns; the database adds its own)."""

    name: str
    columns: tuple[str, ...]  # a numbered table's first column is the file's `id`
    key: tuple[str, ...] = ("id",)
    numbered: bool = False  # the file's ids are its own: the database gives each row a new one
    threads: tuple[str, ...] = ()  # columns holding a thread id of the file
    flags: tuple[str, ...] = ()  # booleans (0 and 1 in SQLite)
    rewrite: Rewrite | None = None  # JSON columns that name ids of the file
    order: tuple[str, ...] = ()  # the file's order of rows, when not its key's (rowid: insert order)
    linked: tuple[str, ...] = ()  # a row's place in a hash chain: the database's, given at writing

    @property
    def stored(self) -> tuple[str, ...]:
        """The columns compared (and written): all but a numbered table's id, which the database makes,
        and the chain's links, which verifying the chain checks instead."""
        kept = self.columns[1:] if self.numbered else self.columns
        return tuple(c for c in kept if c not in self.linked)

    @property
    def reading_order(self) -> tuple[str, ...]:
        return self.order or self.key


def _recalled_episodes(row: dict[str, Any], refs: Refs) -> None:
    """An episodic layer's last recall lists the ids of the episodes it recalled (the inspector's)."""
    data = json.loads(row["data"])
    recalled = data.get("last_recall", {}).get("episodes") if isinstance(data, dict) else None
    if not isinstance(recalled, list) or not recalled:
        return
    for episode in recalled:
        if isinstance(episode, dict) and "id" in episode:
            episode["id"] = refs.episodes.get(episode["id"])
    row["data"] = json.dumps(data, separators=(",", ":"))  # (as the store writes it)


def _paused_run_thread(row: dict[str, Any], refs: Refs) -> None:
    """A paused run's state holds its run record, with the thread the run belongs to."""
    if row["state"] is None:
        return
    state = json.loads(row["state"])
    run = state.get("run") if isinstance(state, dict) else None
    if isinstance(run, dict) and run.get("thread_id") is not None:
        run["thread_id"] = refs.thread(run["thread_id"])
        row["state"] = json.dumps(state, separators=(",", ":"), ensure_ascii=False)


THREADS = Table(
    "threads",
    _columns("id conversation_key status created_at ended_at last_input_tokens last_tokens_estimated"),
    numbered=True,
    flags=("last_tokens_estimated",),
)
EPISODES = Table("episodes", (*EPISODE_ROW.names, "vector"), numbered=True)
AUDIT = Table(
    "audit",
    _columns("id ts agent kind action conversation_key run_id data daemon salts erased seq prev_hash hash"),
    numbered=True,
    linked=("seq", "prev_hash", "hash"),
    order=("seq",),
)
USAGE_COLUMNS = _columns(
    "day agent who channel model trigger calls estimated_calls input_tokens output_tokens cost_micros"
)
# In copying order: a table comes after those its rows refer to.
TABLES: tuple[Table, ...] = (
    Table("identity", ("key", "value"), key=("key",)),
    THREADS,
    Table(
        "messages",
        ("thread_id", "seq", "role", "user_id", "body", "run_id", "created_at", "compacted"),
        key=("thread_id", "seq"),
        threads=("thread_id",),
        flags=("compacted",),
    ),
    Table(
        "summaries",
        ("id", "thread_id", "upto_seq", "text", "run_id", "created_at"),
        numbered=True,
        threads=("thread_id",),
    ),
    EPISODES,
    Table(
        "memory_state",
        ("thread_id", "layer", "data", "upto_seq", "updated_at"),
        key=("thread_id", "layer"),
        threads=("thread_id",),
        rewrite=_recalled_episodes,
    ),
    Table("runs", RUN_ROW.names, threads=("thread_id",), flags=RUN_ROW.flags, order=("rowid",)),
    Table("memories", ("scope", "key", "value", "created_at", "updated_at", "run_id"), key=("scope", "key")),
    Table("facts", FACT_ROW.names, key=("partition", "key")),
    Table(
        "inbound_events",
        ("channel", "event_id", "conversation_key", "run_id", "received_at"),
        key=("channel", "event_id"),
    ),
    Table(
        "media",
        _columns("conversation_key sender sha256 kind mime_type filename size data created_at"),
        key=("conversation_key", "sender", "sha256"),
    ),
    Table("conversation_models", ("conversation_key", "model", "set_at"), key=("conversation_key",)),
    Table("approvals", APPROVAL_ROW.names, rewrite=_paused_run_thread, order=("rowid",)),
    Table("jobs", JOB_ROW.names),
    Table("job_fires", FIRE_ROW.names, key=("job_id", "fire_at")),
    Table("job_deliveries", DELIVERY_ROW.names),
    # budgets' counters, usage days and rate buckets: only the daemon's own file (`_daemon`) holds any
    Table(
        "budget_spend",
        _columns("budget subject period used told"),
        key=("budget", "subject", "period"),
        flags=("told",),
    ),
    Table("usage_days", USAGE_COLUMNS, key=USAGE_COLUMNS[:6]),
    Table("rate_buckets", _columns("scope subject tokens at refused ended"), key=("scope", "subject")),
    AUDIT,  # last: its chain head is the last lock a copy takes, as in a daemon's batch
)
# The daemon's links: daemon-wide in the database, so beside the agents' tables (postgres/copy_links.py).
PERSON_LINKS = Table("person_links", ("account", "person", "source", "linked_at"), key=("account",))
