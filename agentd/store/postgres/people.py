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
from agentd.store.postgres.audit import insert_audit
from agentd.store.postgres.dispatch import Cx, handles
from agentd.store.postgres.episodes import erase_partition
from agentd.store.queries import PersonConversations, PersonData
from agentd.store.records import RUN_COLUMNS, RunRecord
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
    theirs += [key for (key,) in named if key not in keys and key_names(key, q.user_id)]
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
    return events_naming((stored_event(row) for row in rows), user_id, set(theirs))


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
        items = [message_item(*row) for row in messages]
        out.append(thread_item(thread_id, status, created_at, ended_at, items, summaries, layers))
    return out


@handles(PersonData, statements=9)
def person_data(cx: Cx, q: PersonData) -> dict[str, Any]:
    user, partition = q.user_id, partition_of(q.user_id)
    parts = person_conversations(cx, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    runs = _their_runs(cx, user, shared)
    exchanges = cx.run(_EXCHANGES, (cx.agent_id, shared, user, runs)).fetchall()
    conversations = [{"conversation_key": k, "shared": False, "threads": _threads(cx, k)} for k in theirs]
    run_rows = cx.run(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE agent_id = %s"
        " AND (conversation_key = ANY(%s) OR id = ANY(%s)) ORDER BY started_at, n",
        (cx.agent_id, theirs, runs),
    ).fetchall()
    scope = (cx.agent_id, partition)
    return document(
        conversations + shared_conversations(exchanges),
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
        [asdict(RunRecord(*row)) for row in run_rows],
        their_approvals(
            cx.run(_APPROVALS + " WHERE agent_id = %s ORDER BY created_at", (cx.agent_id,)).fetchall(),
            user,
            set(theirs),
        ),
        _events_naming(cx, user, theirs),
        user,
    )


# -- erasure -----------------------------------------------------------------------------------------


@handles(ErasePerson, reads_midway=lambda op: True)
def erase_person(cx: Cx, op: ErasePerson) -> dict[str, int]:
    user = op.user_id
    parts = person_conversations(cx, PersonConversations(user))
    theirs, shared = parts["theirs"], parts["shared"]
    if op.conversations is not None:
        held = set(op.conversations)
        theirs, shared = [k for k in theirs if k in held], [k for k in shared if k in held]
    runs = _their_runs(cx, user, shared)
    counts = _erase_conversations(cx, theirs, runs)
    for kind, n in _tombstone_exchanges(cx, user, shared, runs, op).items():
        counts[kind] = counts.get(kind, 0) + n
    approvals = their_approvals(
        cx.run(_APPROVALS + " WHERE agent_id = %s", (cx.agent_id,)).fetchall(), user, set(theirs)
    )
    cx.run(
        "DELETE FROM approvals WHERE agent_id = %s AND id = ANY(%s)",
        (cx.agent_id, [a["id"] for a in approvals]),
    )
    counts["approvals"] = len(approvals)
    partition = partition_of(user)
    counts["memories"] = _deleted(
        cx, "DELETE FROM memories WHERE agent_id = %s AND scope = %s", (cx.agent_id, partition)
    )
    if counts["memories"]:
        cx.run("UPDATE agents SET memories_version = memories_version + 1 WHERE id = %s", (cx.agent_id,))
    counts["facts"] = _deleted(
        cx, "DELETE FROM facts WHERE agent_id = %s AND partition = %s", (cx.agent_id, partition)
    )
    counts["episodes"] = erase_partition(cx, partition)
    events = _events_naming(cx, user, theirs)
    for event in events:
        e = erase_fields(event, event["erase"])
        cx.run(
            "UPDATE audit SET data = %s, conversation_key = %s, salts = %s, erased = %s"
            " WHERE agent_id = %s AND seq = %s",
            (e.data, e.conversation_key, e.salts, e.erased, cx.agent_id, event["seq"]),
        )
    counts["audit_events"] = len(events)
    erased = counts_of(counts)
    if erased or op.record is not None:
        record = erasure_event(op.subject, erased, op.by, op.record)
        insert_audit(cx, AppendAudit(op.agent, [record], op.ts, op.daemon))
    return erased


def _deleted(cx: Cx, sql: str, params: Sequence[Any]) -> int:
    """How many rows a DELETE took (read at once: the counts go into the erasure's audit event)."""
    found = cx.run(f"WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone", params).fetchone()
    return int(found[0]) if found is not None else 0


def _erase_conversations(cx: Cx, theirs: Sequence[str], runs: Sequence[str]) -> dict[str, int]:
    """Their own conversations, whole; the runs of those and of their turns elsewhere; delivery ids."""
    keys, their_runs, agent = list(theirs), list(runs), cx.agent_id
    counts = {"conversations": len(theirs)}
    for table, kind in (
        ("messages", "messages"),
        ("summaries", "summaries"),
        ("memory_state", "memory_states"),
    ):
        counts[kind] = _deleted(cx, f"DELETE FROM {table} WHERE thread_id IN ({_THREADS_OF})", (agent, keys))
    counts["threads"] = _deleted(
        cx, "DELETE FROM threads WHERE agent_id = %s AND conversation_key = ANY(%s)", (agent, keys)
    )
    counts["runs"] = _deleted(
        cx,
        "DELETE FROM runs WHERE agent_id = %s AND (conversation_key = ANY(%s) OR id = ANY(%s))",
        (agent, keys, their_runs),
    )
    counts["deliveries"] = _deleted(
        cx,
        "DELETE FROM inbound_events WHERE agent_id = %s AND (conversation_key = ANY(%s) OR run_id = ANY(%s))",
        (agent, keys, their_runs),
    )
    return counts


def _tombstone_exchanges(
    cx: Cx, user: str, shared: Sequence[str], runs: Sequence[str], op: ErasePerson
) -> dict[str, int]:
    """Their exchanges in shared conversations become tombstones; what those threads derived from
    everyone's messages is rebuilt without them; every thread touched moves its versions."""
    rows = cx.run(_EXCHANGES, (cx.agent_id, list(shared), user, list(runs))).fetchall()
    cx.run(
        "UPDATE messages m SET body = x.body, user_id = NULL"
        " FROM unnest(%s::bigint[], %s::integer[], %s::text[]) AS x(thread_id, seq, body)"
        " WHERE m.thread_id = x.thread_id AND m.seq = x.seq AND m.agent_id = %s",
        ([r[0] for r in rows], [r[3] for r in rows], [tombstone_body(r[4]) for r in rows], cx.agent_id),
    )
    threads = sorted({row[0] for row in rows})
    counts = {"tombstoned": len(rows), "summaries": 0, "memory_states": 0}
    for thread_id in threads:
        scope = (thread_id, cx.agent_id)
        dropped = _deleted(cx, "DELETE FROM summaries WHERE thread_id = %s AND agent_id = %s", scope)
        if dropped:
            counts["summaries"] += dropped
            cx.run(
                "UPDATE messages SET compacted = false WHERE thread_id = %s AND agent_id = %s AND compacted",
                scope,
            )
            # what the thread now weighs, estimated: over the threshold, it is compacted before its next turn
            cx.run(
                "UPDATE threads SET last_tokens_estimated = true, last_input_tokens ="
                " (SELECT coalesce(sum(length(body)), 0) / 4 FROM messages WHERE thread_id = %s)"
                " WHERE id = %s AND agent_id = %s",
                (thread_id, *scope),
            )
        for layer, data in cx.run(
            "SELECT layer, data FROM memory_state WHERE thread_id = %s AND agent_id = %s", scope
        ).fetchall():
            after = layer_after_erasure(data, op.rebuild_layers_holding, op.drop_layer_keys)
            if after is None:
                cx.run(
                    "DELETE FROM memory_state WHERE thread_id = %s AND agent_id = %s AND layer = %s",
                    (*scope, layer),
                )
            elif after != data:
                cx.run(
                    "UPDATE memory_state SET data = %s WHERE thread_id = %s AND agent_id = %s AND layer = %s",
                    (after, *scope, layer),
                )
            counts["memory_states"] += after != data
    # every daemon's cached copy of these threads is read again at its next claim
    cx.run(
        "UPDATE threads SET version = version + 1, layers_version = layers_version + 1"
        " WHERE agent_id = %s AND id = ANY(%s)",
        (cx.agent_id, threads),
    )
    return counts
