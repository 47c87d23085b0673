"""A person's data in one agent's rows of the shared database: found (PersonConversations,
PersonData), erased (ErasePerson). What counts as theirs: agentd/store/people.py.

An erasure moves what other daemons check their caches against, so none keeps serving a hot copy:
the versions of the shared threads it tombstoned (their cached copies are read again), the agent's
memories version (persistent keys), and the person's episode partition goes with its counter row
(an index of it reloads, agentd/store/postgres/episodes.py). Their own conversations' threads are
deleted, which a claim's mark shows as a thread gone.

What PostgreSQL does with deleted rows is its own: they stay in the table files until VACUUM marks
the space free (and in the WAL and its archives); README's "Privacy and audit" says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from agentd.store import people as person
from agentd.store import person_export as export
from agentd.store.audit_chain import TRAIL_COLUMNS, Erased, stored_event
from agentd.store.postgres.audit import insert_audit
from agentd.store.postgres.episodes import erase_partition
from agentd.store.postgres.handlers import Cx, handles
from agentd.store.queries import PersonConversations, PersonData
from agentd.store.records import RUN_ROW, AuditRecord
from agentd.store.writes import AppendAudit, ErasePerson

_THREADS_OF = "SELECT id FROM threads WHERE agent_id = %s AND conversation_key = ANY(%s)"
_EXCHANGES = (
    "SELECT m.thread_id, t.conversation_key, t.status, m.seq, m.body, m.run_id, m.created_at"
    " FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.agent_id = %s"
    " AND t.conversation_key = ANY(%s) AND (m.user_id = %s OR m.run_id = ANY(%s))"
    ' ORDER BY t.conversation_key COLLATE "C", m.thread_id, m.seq'
)
_APPROVALS = "SELECT id, conversation_key, tool, args, requested_by, status, created_at FROM approvals"


@handles(PersonConversations, statements=3)
def person_conversations(cx: Cx, q: PersonConversations) -> dict[str, list[str]]:
    spoke = cx.run(
        "SELECT t.conversation_key, bool_or(m.role = 'user' AND m.user_id IS DISTINCT FROM %s)"
        " FROM threads t JOIN messages m ON m.thread_id = t.id WHERE t.agent_id = %s AND t.conversation_key IN"
        " (SELECT t2.conversation_key FROM messages m2 JOIN threads t2 ON t2.id = m2.thread_id"
        "  WHERE m2.agent_id = %s AND m2.user_id = %s)"
        ' GROUP BY t.conversation_key ORDER BY t.conversation_key COLLATE "C"',
        (q.user_id, cx.agent_id, cx.agent_id, q.user_id),
    ).fetchall()
    keys = {key for key, _ in spoke}
    theirs = [key for key, shared in spoke if not shared]
    shared = [key for key, is_shared in spoke if is_shared]
    named = cx.run(
        "SELECT DISTINCT conversation_key FROM runs WHERE agent_id = %s AND strpos(conversation_key, %s) > 0",
        (cx.agent_id, q.user_id),
    ).fetchall()
    theirs += [key for (key,) in named if key not in keys and person.key_names(key, q.user_id)]
    return {"theirs": sorted(theirs), "shared": shared}


def _their_runs(cx: Cx, user_id: str, shared: Sequence[str]) -> list[str]:
    """The runs their messages started in shared conversations (each holds one exchange of theirs)."""
    found = cx.run(
        "SELECT DISTINCT m.run_id FROM messages m JOIN threads t ON t.id = m.thread_id WHERE m.agent_id = %s"
        " AND m.user_id = %s AND m.run_id IS NOT NULL AND t.conversation_key = ANY(%s)",
        (cx.agent_id, user_id, list(shared)),
    )
    return [row[0] for row in found.fetchall()]


def _events_naming(cx: Cx, user_id: str, theirs: Sequence[str]) -> list[dict[str, Any]]:
    rows = cx.run(
        f"SELECT {TRAIL_COLUMNS} FROM audit WHERE agent_id = %s AND (conversation_key = ANY(%s)"
        " OR strpos(data, %s) > 0 OR strpos(conversation_key, %s) > 0) ORDER BY seq",
        (cx.agent_id, list(theirs), _in_json(user_id), user_id),
    ).fetchall()
    return export.events_naming((stored_event(row) for row in rows), user_id, set(theirs))


def _in_json(text: str) -> str:
    return json.dumps(text)[1:-1]  # as it appears inside stored JSON


# -- export ------------------------------------------------------------------------------------------


def _threads(cx: Cx, key: str) -> list[dict[str, Any]]:
    out = []
    for thread_id, status, created_at, ended_at in cx.run(
        "SELECT id, status, created_at, ended_at FROM threads WHERE agent_id = %s AND conversation_key = %s"
        " ORDER BY id",
        (cx.agent_id, key),
    ).fetchall():
        scope = (thread_id, cx.agent_id)
        messages = cx.run(
            "SELECT seq, body, run_id, created_at FROM messages WHERE thread_id = %s AND agent_id = %s ORDER BY seq",
            scope,
        ).fetchall()
        summaries = cx.run(
            "SELECT upto_seq, text, created_at FROM summaries WHERE thread_id = %s AND agent_id = %s ORDER BY id",
            scope,
        ).fetchall()
        layers = cx.run(
            "SELECT layer, data, upto_seq FROM memory_state WHERE thread_id = %s AND agent_id = %s ORDER BY layer",
            scope,
        ).fetchall()
        items = [export.message_item(*row) for row in messages]
        out.append(export.thread_item(thread_id, status, created_at, ended_at, items, summaries, layers))
    return out


@handles(PersonData, statements=10)
def person_data(cx: Cx, q: PersonData) -> dict[str, Any]:
    user, partition = q.user_id, person.partition_of(q.user_id)
    parts = person_conversations(cx, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    runs = _their_runs(cx, user, shared)
    exchanges = cx.run(_EXCHANGES, (cx.agent_id, shared, user, runs)).fetchall()
    chosen = dict(
        cx.run(
            "SELECT conversation_key, model FROM conversation_models"
            " WHERE agent_id = %s AND conversation_key = ANY(%s)",
            (cx.agent_id, theirs),
        ).fetchall()
    )
    conversations = [
        {"conversation_key": k, "shared": False, "model": chosen.get(k), "threads": _threads(cx, k)}
        for k in theirs
    ]  # (model: the conversation's /model choice, None when it has the agent file's)
    run_rows = cx.run(
        f"SELECT {RUN_ROW.columns} FROM runs WHERE agent_id = %s"
        " AND (conversation_key = ANY(%s) OR id = ANY(%s)) ORDER BY started_at, n",
        (cx.agent_id, theirs, runs),
    ).fetchall()
    scope = (cx.agent_id, partition)
    return export.document(
        conversations + export.shared_conversations(exchanges),
        cx.run(
            "SELECT key, value, created_at, updated_at FROM memories WHERE agent_id = %s AND scope = %s ORDER BY key",
            scope,
        ).fetchall(),
        cx.run(
            "SELECT key, value, confidence, source, created_at, updated_at FROM facts"
            " WHERE agent_id = %s AND partition = %s ORDER BY key",
            scope,
        ).fetchall(),
        cx.run(
            "SELECT id, conversation_key, text, created_at, importance, embedder FROM episodes"
            " WHERE agent_id = %s AND partition = %s ORDER BY id",
            scope,
        ).fetchall(),
        [asdict(RUN_ROW.record_of(row)) for row in run_rows],
        person.their_approvals(
            cx.run(_APPROVALS + " WHERE agent_id = %s ORDER BY created_at", (cx.agent_id,)).fetchall(),
            user,
            set(theirs),
        ),
        _events_naming(cx, user, theirs),
        user,
        cx.run(
            "SELECT conversation_key, sha256, kind, mime_type, filename, size, created_at FROM media"
            " WHERE agent_id = %s AND (sender = %s OR conversation_key = ANY(%s))"
            " ORDER BY created_at, conversation_key, sha256",
            (cx.agent_id, user, theirs),
        ).fetchall(),
    )


# -- erasure -----------------------------------------------------------------------------------------


@handles(ErasePerson, reads_midway=lambda op: True)
def erase_person(cx: Cx, op: ErasePerson) -> dict[str, int]:
    return person.erase(PostgresErasure(cx), op)


class PostgresErasure:
    """The steps of an erasure (agentd.store.people.ErasureSteps) in one agent's rows. Counts are read as
    each statement runs (the erasure's audit event says them): the batch is an explicit transaction."""

    def __init__(self, cx: Cx):
        self.cx = cx
        self.agent = cx.agent_id

    def _count(self, sql: str, *args: Any) -> int:
        found = self.cx.run(
            f"WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone", (self.agent, *args)
        )
        row = found.fetchone()
        return int(row[0]) if row is not None else 0

    def conversations(self, user_id: str) -> dict[str, list[str]]:
        return person_conversations(self.cx, PersonConversations(user_id))

    def runs_in(self, user_id: str, shared: Sequence[str]) -> list[str]:
        return _their_runs(self.cx, user_id, shared)

    def drop_conversations(self, theirs: Sequence[str], runs: Sequence[str]) -> dict[str, int]:
        keys, their_runs = list(theirs), list(runs)
        counts = {"conversations": len(theirs)}
        for table, kind in (
            ("messages", "messages"),
            ("summaries", "summaries"),
            ("memory_state", "memory_states"),
        ):
            counts[kind] = self._count(
                f"DELETE FROM {table} WHERE agent_id = %s AND thread_id IN ({_THREADS_OF})", self.agent, keys
            )
        counts["threads"] = self._count(
            "DELETE FROM threads WHERE agent_id = %s AND conversation_key = ANY(%s)", keys
        )
        self._count(
            "DELETE FROM conversation_models WHERE agent_id = %s AND conversation_key = ANY(%s)", keys
        )
        counts["runs"] = self._count(
            "DELETE FROM runs WHERE agent_id = %s AND (conversation_key = ANY(%s) OR id = ANY(%s))",
            keys,
            their_runs,
        )
        counts["deliveries"] = self._count(
            "DELETE FROM inbound_events WHERE agent_id = %s AND (conversation_key = ANY(%s) OR run_id = ANY(%s))",
            keys,
            their_runs,
        )
        return counts

    def exchanges(self, user_id: str, shared: Sequence[str], runs: Sequence[str]) -> list[tuple[Any, ...]]:
        return self.cx.run(_EXCHANGES, (self.agent, list(shared), user_id, list(runs))).fetchall()

    def rewrite(self, messages: Sequence[tuple[int, int, str]]) -> None:
        self.cx.run(
            "UPDATE messages m SET body = x.body, user_id = NULL"
            " FROM unnest(%s::bigint[], %s::integer[], %s::text[]) AS x(thread_id, seq, body)"
            " WHERE m.thread_id = x.thread_id AND m.seq = x.seq AND m.agent_id = %s",
            ([m[0] for m in messages], [m[1] for m in messages], [m[2] for m in messages], self.agent),
        )

    def drop_summaries(self, thread_id: int) -> int:
        dropped = self._count("DELETE FROM summaries WHERE agent_id = %s AND thread_id = %s", thread_id)
        if dropped:
            scope = (thread_id, self.agent)
            self.cx.run(
                "UPDATE messages SET compacted = false WHERE thread_id = %s AND agent_id = %s AND compacted",
                scope,
            )
            self.cx.run(
                "UPDATE threads SET last_tokens_estimated = true, last_input_tokens ="
                " (SELECT coalesce(sum(length(body)), 0) / 4 FROM messages WHERE thread_id = %s)"
                " WHERE id = %s AND agent_id = %s",
                (thread_id, *scope),
            )
        return dropped

    def layers(self, thread_id: int) -> list[tuple[str, str]]:
        return self.cx.run(
            "SELECT layer, data FROM memory_state WHERE thread_id = %s AND agent_id = %s",
            (thread_id, self.agent),
        ).fetchall()

    def set_layer(self, thread_id: int, layer: str, data: str | None) -> None:
        scope = (thread_id, self.agent, layer)
        if data is None:
            self.cx.run(
                "DELETE FROM memory_state WHERE thread_id = %s AND agent_id = %s AND layer = %s", scope
            )
        else:
            self.cx.run(
                "UPDATE memory_state SET data = %s WHERE thread_id = %s AND agent_id = %s AND layer = %s",
                (data, *scope),
            )

    def touched(self, thread_ids: Sequence[int]) -> None:
        """Every daemon's cached copy of these threads is read again at its next claim."""
        self.cx.run(
            "UPDATE threads SET version = version + 1, layers_version = layers_version + 1"
            " WHERE agent_id = %s AND id = ANY(%s)",
            (self.agent, list(thread_ids)),
        )

    def approvals(self) -> list[tuple[str, str, str, str, str, str, float]]:
        return self.cx.run(_APPROVALS + " WHERE agent_id = %s", (self.agent,)).fetchall()

    def drop_approvals(self, ids: Sequence[str]) -> None:
        self.cx.run("DELETE FROM approvals WHERE agent_id = %s AND id = ANY(%s)", (self.agent, list(ids)))

    def drop_usage(self, user_id: str) -> dict[str, int]:
        # "<channel>:<user id>" is an account of theirs on any channel
        mine = "({col} = %s OR substr({col}, strpos({col}, ':') + 1) = %s)"
        return {
            "usage_rows": self._count(
                f"DELETE FROM usage_days WHERE agent_id = %s AND {mine.format(col='who')}", user_id, user_id
            ),
            "budget_counters": self._count(
                f"DELETE FROM budget_spend WHERE agent_id = %s AND {mine.format(col='subject')}",
                user_id,
                user_id,
            ),
            "rate_buckets": self._count(
                f"DELETE FROM rate_buckets WHERE agent_id = %s AND {mine.format(col='subject')}",
                user_id,
                user_id,
            ),
        }

    def drop_partition(self, partition: str) -> dict[str, int]:
        counts = {
            "memories": self._count("DELETE FROM memories WHERE agent_id = %s AND scope = %s", partition),
            "facts": self._count("DELETE FROM facts WHERE agent_id = %s AND partition = %s", partition),
            "episodes": erase_partition(self.cx, partition),
        }
        if counts["memories"]:  # every daemon reads the agent's keys again
            self.cx.run(
                "UPDATE agents SET memories_version = memories_version + 1 WHERE id = %s", (self.agent,)
            )
        return counts

    def drop_media(self, user_id: str, theirs: Sequence[str]) -> int:
        return self._count(
            "DELETE FROM media WHERE agent_id = %s AND (sender = %s OR conversation_key = ANY(%s))",
            user_id,
            list(theirs),
        )

    def events_naming(self, user_id: str, theirs: Sequence[str]) -> list[dict[str, Any]]:
        return _events_naming(self.cx, user_id, theirs)

    def rewrite_event(self, seq: int, erased: Erased) -> None:
        self.cx.run(
            "UPDATE audit SET data = %s, conversation_key = %s, salts = %s, erased = %s"
            " WHERE agent_id = %s AND seq = %s",
            (erased.data, erased.conversation_key, erased.salts, erased.erased, self.agent, seq),
        )

    def append(self, record: AuditRecord, op: ErasePerson) -> None:
        insert_audit(self.cx, AppendAudit(op.agent, [record], op.ts, op.daemon))
