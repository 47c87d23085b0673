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

from agentd.store import people as person
from agentd.store import person_export as export
from agentd.store.audit_chain import TRAIL_COLUMNS, Erased, stored_event
from agentd.store.queries import PersonConversations, PersonData
from agentd.store.records import RUN_ROW, AuditRecord
from agentd.store.sqlite.audit import insert_audit
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import AppendAudit, ErasePerson

_IN = "(SELECT value FROM json_each(?))"  # a list passed as one JSON parameter, whatever its length
_THREADS_OF = f"SELECT id FROM threads WHERE conversation_key IN {_IN}"
_EXCHANGES = (
    "SELECT m.thread_id, t.conversation_key, t.status, m.seq, m.body, m.run_id, m.created_at"
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
        if key not in spoke and person.key_names(key, q.user_id):
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
    return export.events_naming((stored_event(row) for row in rows), user_id, set(theirs))


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
        items = [export.message_item(*row) for row in messages]
        out.append(export.thread_item(thread_id, status, created_at, ended_at, items, summaries, layers))
    return out


@handles(PersonData)
def person_data(conn: sqlite3.Connection, q: PersonData) -> dict[str, Any]:
    user, partition = q.user_id, person.partition_of(q.user_id)
    parts = person_conversations(conn, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    runs = _their_runs(conn, user, shared)
    exchanges = conn.execute(_EXCHANGES, (_as_list(shared), user, _as_list(runs))).fetchall()
    chosen = dict(
        conn.execute(
            f"SELECT conversation_key, model FROM conversation_models WHERE conversation_key IN {_IN}",
            (_as_list(theirs),),
        ).fetchall()
    )
    conversations = [
        {"conversation_key": k, "shared": False, "model": chosen.get(k), "threads": _threads(conn, k)}
        for k in theirs
    ]  # (model: the conversation's /model choice, None when it has the agent file's)
    run_rows = conn.execute(
        f"SELECT {RUN_ROW.columns} FROM runs WHERE conversation_key IN {_IN} OR id IN {_IN}"
        " ORDER BY started_at, rowid",
        (_as_list(theirs), _as_list(runs)),
    ).fetchall()
    return export.document(
        conversations + export.shared_conversations(exchanges),
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
        [asdict(RUN_ROW.record_of(row)) for row in run_rows],
        person.their_approvals(conn.execute(_APPROVALS + " ORDER BY created_at"), user, set(theirs)),
        _events_naming(conn, user, theirs),
        user,
        conn.execute(
            "SELECT conversation_key, sha256, kind, mime_type, filename, size, created_at FROM media"
            f" WHERE sender = ? OR conversation_key IN {_IN} ORDER BY created_at, conversation_key, sha256",
            (user, _as_list(theirs)),
        ),
    )


# -- erasure -----------------------------------------------------------------------------------------


@handles(ErasePerson)
def erase_person(conn: sqlite3.Connection, op: ErasePerson) -> dict[str, int]:
    return person.erase(SqliteErasure(conn), op)


class SqliteErasure:
    """The steps of an erasure (agentd.store.people.ErasureSteps) in one agent's file."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def conversations(self, user_id: str) -> dict[str, list[str]]:
        return person_conversations(self.conn, PersonConversations(user_id))

    def runs_in(self, user_id: str, shared: Sequence[str]) -> list[str]:
        return _their_runs(self.conn, user_id, shared)

    def drop_conversations(self, theirs: Sequence[str], runs: Sequence[str]) -> dict[str, int]:
        keys, their_runs = _as_list(theirs), _as_list(runs)
        counts = {"conversations": len(theirs)}
        for table, kind in (
            ("messages", "messages"),
            ("summaries", "summaries"),
            ("memory_state", "memory_states"),
        ):
            counts[kind] = self._count(f"DELETE FROM {table} WHERE thread_id IN ({_THREADS_OF})", keys)
        counts["threads"] = self._count(f"DELETE FROM threads WHERE conversation_key IN {_IN}", keys)
        self._count(f"DELETE FROM conversation_models WHERE conversation_key IN {_IN}", keys)
        counts["runs"] = self._count(
            f"DELETE FROM runs WHERE conversation_key IN {_IN} OR id IN {_IN}", keys, their_runs
        )
        counts["deliveries"] = self._count(
            f"DELETE FROM inbound_events WHERE conversation_key IN {_IN} OR run_id IN {_IN}", keys, their_runs
        )
        return counts

    def _count(self, sql: str, *args: Any) -> int:
        return self.conn.execute(sql, args).rowcount

    def exchanges(self, user_id: str, shared: Sequence[str], runs: Sequence[str]) -> list[tuple[Any, ...]]:
        return self.conn.execute(_EXCHANGES, (_as_list(shared), user_id, _as_list(runs))).fetchall()

    def rewrite(self, messages: Sequence[tuple[int, int, str]]) -> None:
        self.conn.executemany(
            "UPDATE messages SET body = ?, user_id = NULL WHERE thread_id = ? AND seq = ?",
            [(body, thread_id, seq) for thread_id, seq, body in messages],
        )

    def drop_summaries(self, thread_id: int) -> int:
        dropped = self._count("DELETE FROM summaries WHERE thread_id = ?", thread_id)
        if dropped:
            self.conn.execute(
                "UPDATE messages SET compacted = 0 WHERE thread_id = ? AND compacted = 1", (thread_id,)
            )
            self.conn.execute(
                "UPDATE threads SET last_tokens_estimated = 1, last_input_tokens ="
                " (SELECT COALESCE(SUM(LENGTH(body)), 0) / 4 FROM messages WHERE thread_id = ?) WHERE id = ?",
                (thread_id, thread_id),
            )
        return dropped

    def layers(self, thread_id: int) -> list[tuple[str, str]]:
        return self.conn.execute(
            "SELECT layer, data FROM memory_state WHERE thread_id = ?", (thread_id,)
        ).fetchall()

    def set_layer(self, thread_id: int, layer: str, data: str | None) -> None:
        if data is None:
            self.conn.execute(
                "DELETE FROM memory_state WHERE thread_id = ? AND layer = ?", (thread_id, layer)
            )
        else:
            self.conn.execute(
                "UPDATE memory_state SET data = ? WHERE thread_id = ? AND layer = ?", (data, thread_id, layer)
            )

    def touched(self, thread_ids: Sequence[int]) -> None:
        return None  # one daemon owns the file: its own caches are dropped by the engine

    def approvals(self) -> list[tuple[str, str, str, str, str, str, float]]:
        return self.conn.execute(_APPROVALS).fetchall()

    def drop_approvals(self, ids: Sequence[str]) -> None:
        self.conn.executemany("DELETE FROM approvals WHERE id = ?", [(i,) for i in ids])

    def drop_usage(self, user_id: str) -> dict[str, int]:
        # "<channel>:<user id>" is an account of theirs on any channel
        mine = "{col} = ? OR substr({col}, instr({col}, ':') + 1) = ?"
        return {
            "usage_rows": self._count(
                f"DELETE FROM usage_days WHERE {mine.format(col='who')}", user_id, user_id
            ),
            "budget_counters": self._count(
                f"DELETE FROM budget_spend WHERE {mine.format(col='subject')}", user_id, user_id
            ),
            "rate_buckets": self._count(
                f"DELETE FROM rate_buckets WHERE {mine.format(col='subject')}", user_id, user_id
            ),
        }

    def drop_partition(self, partition: str) -> dict[str, int]:
        counts = {
            "memories": self._count("DELETE FROM memories WHERE scope = ?", partition),
            "facts": self._count("DELETE FROM facts WHERE partition = ?", partition),
            "episodes": self._count("DELETE FROM episodes WHERE partition = ?", partition),
        }
        if counts["episodes"]:
            # the keyword index keeps a deleted row's terms until its segments are merged: merge them now
            self.conn.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('optimize')")
        return counts

    def drop_media(self, user_id: str, theirs: Sequence[str]) -> int:
        return self._count(
            f"DELETE FROM media WHERE sender = ? OR conversation_key IN {_IN}", user_id, _as_list(theirs)
        )

    def events_naming(self, user_id: str, theirs: Sequence[str]) -> list[dict[str, Any]]:
        return _events_naming(self.conn, user_id, theirs)

    def rewrite_event(self, seq: int, erased: Erased) -> None:
        self.conn.execute(
            "UPDATE audit SET data = ?, conversation_key = ?, salts = ?, erased = ? WHERE seq = ?",
            (erased.data, erased.conversation_key, erased.salts, erased.erased, seq),
        )

    def append(self, record: AuditRecord, op: ErasePerson) -> None:
        insert_audit(self.conn, AppendAudit(op.agent, [record], op.ts, op.daemon))
