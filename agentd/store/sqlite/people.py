"""A person's data in one agent's file: found (PersonConversations, PersonData), erased (ErasePerson).
What counts as theirs, what a tombstone keeps and which audit fields name them: agentd/store/people.py.

Erasure deletes with `secure_delete` on (set for every agentd connection: deleted content is
overwritten with zeros) and the store follows its commit with a truncating WAL checkpoint, so the
erased text is left neither in the file's free pages nor in the log (agentd/store/sqlite/store.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from agentd.store.audit_chain import TRAIL_COLUMNS, erase_fields, stored_event
from agentd.store.people import (
    counts_of,
    document,
    erasure_event,
    events_naming,
    key_names,
    layer_after_erasure,
    message_item,
    partition_of,
    shared_conversations,
    their_approvals,
    thread_item,
    tombstone_body,
)
from agentd.store.queries import PersonConversations, PersonData
from agentd.store.records import RUN_COLUMNS, RunRecord
from agentd.store.sqlite.audit import insert_audit
from agentd.store.sqlite.dispatch import handles
from agentd.store.writes import AppendAudit, ErasePerson

_IN = "(SELECT value FROM json_each(?))"  # a list passed as one JSON parameter, whatever its length
_THREADS_OF = f"SELECT id FROM threads WHERE conversation_key IN {_IN}"
_EXCHANGES = (
    "SELECT m.thread_id, t.conversation_key, t.status, m.seq, m.body, m.run_id, m.created_at, m.id"
    f" FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.conversation_key IN {_IN}"
    f" AND (m.user_id = ? OR m.run_id IN {_IN}) ORDER BY t.conversation_key, m.thread_id, m.seq"
)
_APPROVALS = "SELECT id, conversation_key, tool, args, requested_by, status, created_at FROM approvals"


def _as_list(values: Sequence[str]) -> str:
    return json.dumps(list(values))


@handles(PersonConversations)
def person_conversations(conn: sqlite3.Connection, q: PersonConversations) -> dict[str, list[str]]:
    spoke = [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT t.conversation_key FROM messages m JOIN threads t ON t.id = m.thread_id"
            " WHERE m.user_id = ? ORDER BY 1",
            (q.user_id,),
        )
    ]
    theirs: list[str] = []
    shared: list[str] = []
    for key in spoke:
        other = conn.execute(
            "SELECT 1 FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.conversation_key = ?"
            " AND m.role = 'user' AND (m.user_id IS NULL OR m.user_id <> ?) LIMIT 1",
            (key, q.user_id),
        ).fetchone()
        (shared if other else theirs).append(key)
    for (key,) in conn.execute(
        "SELECT DISTINCT conversation_key FROM runs WHERE instr(conversation_key, ?) > 0", (q.user_id,)
    ).fetchall():
        if key not in spoke and key_names(key, q.user_id):
            theirs.append(key)
    return {"theirs": sorted(theirs), "shared": shared}


def _their_runs(conn: sqlite3.Connection, user_id: str, shared: Sequence[str]) -> list[str]:
    """The runs their messages started in shared conversations (each holds one exchange of theirs)."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT m.run_id FROM messages m JOIN threads t ON t.id = m.thread_id"
            f" WHERE m.user_id = ? AND m.run_id IS NOT NULL AND t.conversation_key IN {_IN}",
            (user_id, _as_list(shared)),
        )
    ]


def _events_naming(conn: sqlite3.Connection, user_id: str, theirs: Sequence[str]) -> list[dict[str, Any]]:
    needle = json.dumps(user_id)[1:-1]  # as it appears inside stored JSON
    rows = conn.execute(
        f"SELECT {TRAIL_COLUMNS} FROM audit WHERE conversation_key IN {_IN}"
        " OR instr(data, ?) > 0 OR instr(conversation_key, ?) > 0 ORDER BY seq",
        (_as_list(theirs), needle, user_id),
    )
    return events_naming((stored_event(row) for row in rows), user_id, set(theirs))


# -- export ------------------------------------------------------------------------------------------


def _threads(conn: sqlite3.Connection, key: str) -> list[dict[str, Any]]:
    out = []
    for thread_id, status, created_at, ended_at in conn.execute(
        "SELECT id, status, created_at, ended_at FROM threads WHERE conversation_key = ? ORDER BY id", (key,)
    ).fetchall():
        messages = conn.execute(
            "SELECT seq, body, run_id, created_at FROM messages WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        )
        summaries = conn.execute(
            "SELECT upto_seq, text, created_at FROM summaries WHERE thread_id = ? ORDER BY id", (thread_id,)
        ).fetchall()
        layers = conn.execute(
            "SELECT layer, data, upto_seq FROM memory_state WHERE thread_id = ? ORDER BY layer", (thread_id,)
        ).fetchall()
        items = [message_item(*row) for row in messages]
        out.append(thread_item(thread_id, status, created_at, ended_at, items, summaries, layers))
    return out


@handles(PersonData)
def person_data(conn: sqlite3.Connection, q: PersonData) -> dict[str, Any]:
    user, partition = q.user_id, partition_of(q.user_id)
    parts = person_conversations(conn, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    runs = _their_runs(conn, user, shared)
    exchanges = conn.execute(_EXCHANGES, (_as_list(shared), user, _as_list(runs))).fetchall()
    conversations = [{"conversation_key": k, "shared": False, "threads": _threads(conn, k)} for k in theirs]
    run_rows = conn.execute(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE conversation_key IN {_IN} OR id IN {_IN}"
        " ORDER BY started_at, rowid",
        (_as_list(theirs), _as_list(runs)),
    ).fetchall()
    return document(
        conversations + shared_conversations(row[:7] for row in exchanges),
        conn.execute(
            "SELECT key, value, created_at, updated_at FROM memories WHERE scope = ? ORDER BY key",
            (partition,),
        ),
        conn.execute(
            "SELECT key, value, confidence, source, created_at, updated_at FROM facts WHERE partition = ?"
            " ORDER BY key",
            (partition,),
        ),
        conn.execute(
            "SELECT id, conversation_key, text, created_at, importance, embedder FROM episodes"
            " WHERE partition = ? ORDER BY id",
            (partition,),
        ),
        [asdict(RunRecord(*row)) for row in run_rows],
        their_approvals(conn.execute(_APPROVALS + " ORDER BY created_at"), user, set(theirs)),
        _events_naming(conn, user, theirs),
        user,
    )


# -- erasure -----------------------------------------------------------------------------------------


@handles(ErasePerson)
def erase_person(conn: sqlite3.Connection, op: ErasePerson) -> dict[str, int]:
    user = op.user_id
    parts = person_conversations(conn, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    if op.conversations is not None:
        held = set(op.conversations)
        theirs, shared = [k for k in theirs if k in held], [k for k in shared if k in held]
    runs = _their_runs(conn, user, shared)
    counts = _erase_conversations(conn, theirs, runs)
    for kind, n in _tombstone_exchanges(conn, user, shared, runs, op).items():
        counts[kind] = counts.get(kind, 0) + n
    approvals = their_approvals(conn.execute(_APPROVALS).fetchall(), user, set(theirs))
    conn.executemany("DELETE FROM approvals WHERE id = ?", [(a["id"],) for a in approvals])
    counts["approvals"] = len(approvals)
    partition = partition_of(user)
    counts["memories"] = conn.execute("DELETE FROM memories WHERE scope = ?", (partition,)).rowcount
    counts["facts"] = conn.execute("DELETE FROM facts WHERE partition = ?", (partition,)).rowcount
    counts["episodes"] = conn.execute("DELETE FROM episodes WHERE partition = ?", (partition,)).rowcount
    if counts["episodes"]:
        # the keyword index keeps a deleted row's terms until its segments are merged: merge them now
        conn.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('optimize')")
    events = _events_naming(conn, user, theirs)
    for event in events:
        e = erase_fields(event, event["erase"])
        conn.execute(
            "UPDATE audit SET data = ?, conversation_key = ?, salts = ?, erased = ? WHERE seq = ?",
            (e.data, e.conversation_key, e.salts, e.erased, event["seq"]),
        )
    counts["audit_events"] = len(events)
    erased = counts_of(counts)
    if erased or op.record is not None:
        record = erasure_event(op.subject, erased, op.by, op.record)
        insert_audit(conn, AppendAudit(op.agent, [record], op.ts, op.daemon))
    return erased


def _erase_conversations(
    conn: sqlite3.Connection, theirs: Sequence[str], runs: Sequence[str]
) -> dict[str, int]:
    """Their own conversations, whole; the runs of those and of their turns elsewhere; delivery ids."""
    keys, their_runs = _as_list(theirs), _as_list(runs)
    counts = {"conversations": len(theirs)}
    for table, kind in (
        ("messages", "messages"),
        ("summaries", "summaries"),
        ("memory_state", "memory_states"),
    ):
        counts[kind] = conn.execute(
            f"DELETE FROM {table} WHERE thread_id IN ({_THREADS_OF})", (keys,)
        ).rowcount
    counts["threads"] = conn.execute(f"DELETE FROM threads WHERE conversation_key IN {_IN}", (keys,)).rowcount
    counts["runs"] = conn.execute(
        f"DELETE FROM runs WHERE conversation_key IN {_IN} OR id IN {_IN}", (keys, their_runs)
    ).rowcount
    counts["deliveries"] = conn.execute(
        f"DELETE FROM inbound_events WHERE conversation_key IN {_IN} OR run_id IN {_IN}", (keys, their_runs)
    ).rowcount
    return counts


def _tombstone_exchanges(
    conn: sqlite3.Connection, user: str, shared: Sequence[str], runs: Sequence[str], op: ErasePerson
) -> dict[str, int]:
    """Their exchanges in shared conversations become tombstones; what those threads derived from
    everyone's messages is rebuilt without them (see ErasePerson)."""
    rows = conn.execute(_EXCHANGES, (_as_list(shared), user, _as_list(runs))).fetchall()
    conn.executemany(
        "UPDATE messages SET body = ?, user_id = NULL WHERE id = ?",
        [(tombstone_body(r[4]), r[7]) for r in rows],
    )
    counts = {"tombstoned": len(rows), "summaries": 0, "memory_states": 0}
    for thread_id in sorted({row[0] for row in rows}):
        dropped = conn.execute("DELETE FROM summaries WHERE thread_id = ?", (thread_id,)).rowcount
        if dropped:
            counts["summaries"] += dropped
            conn.execute(
                "UPDATE messages SET compacted = 0 WHERE thread_id = ? AND compacted = 1", (thread_id,)
            )
            # what the thread now weighs, estimated: over the threshold, it is compacted before its next turn
            conn.execute(
                "UPDATE threads SET last_tokens_estimated = 1, last_input_tokens ="
                " (SELECT COALESCE(SUM(LENGTH(body)), 0) / 4 FROM messages WHERE thread_id = ?) WHERE id = ?",
                (thread_id, thread_id),
            )
        for layer, data in conn.execute(
            "SELECT layer, data FROM memory_state WHERE thread_id = ?", (thread_id,)
        ).fetchall():
            after = layer_after_erasure(data, op.rebuild_layers_holding, op.drop_layer_keys)
            if after is None:
                conn.execute("DELETE FROM memory_state WHERE thread_id = ? AND layer = ?", (thread_id, layer))
            elif after != data:
                conn.execute(
                    "UPDATE memory_state SET data = ? WHERE thread_id = ? AND layer = ?",
                    (after, thread_id, layer),
                )
            counts["memory_states"] += after != data
    return counts
