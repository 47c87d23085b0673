"""A person's export, as every backend assembles it: their threads (each message as stored, media by
reference), the conversations they shared with others (their exchanges only), their approvals and the
audit events that name them. Who a conversation belongs to is people.py's."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

from agentd.messages import load_message
from agentd.store.people import audit_fields, partition_of


def message_item(seq: int, body: str, run_id: str | None, created_at: float) -> dict[str, Any]:
    shown = load_message(body).model_dump(mode="json", exclude_none=True)
    return {"seq": seq, "created_at": created_at, "run_id": run_id, **shown}


def thread_item(
    thread_id: int,
    status: str,
    created_at: float,
    ended_at: float | None,
    messages: list[dict[str, Any]],
    summaries: Iterable[tuple[int, str, float]],
    layers: Iterable[tuple[str, str, int]],
) -> dict[str, Any]:
    """One thread of a conversation of theirs: messages, compaction summaries, memory layer states."""
    return {
        "thread_id": thread_id,
        "status": status,
        "created_at": created_at,
        "ended_at": ended_at,
        "messages": messages,
        "summaries": [{"upto_seq": u, "text": t, "created_at": c} for u, t, c in summaries],
        "memory_state": {layer: {"data": json.loads(data), "upto_seq": upto} for layer, data, upto in layers},
    }


def shared_conversations(rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Their exchanges in shared conversations, from rows (thread_id, conversation_key, status, seq,
    body, run_id, created_at) in conversation, thread and seq order."""
    by_key: dict[str, dict[int, dict[str, Any]]] = {}
    for thread_id, key, status, seq, body, run_id, created_at in rows:
        thread = by_key.setdefault(key, {}).setdefault(
            thread_id, {"thread_id": thread_id, "status": status, "messages": []}
        )
        thread["messages"].append(message_item(seq, body, run_id, created_at))
    return [
        {"conversation_key": key, "shared": True, "threads": list(threads.values())}
        for key, threads in by_key.items()
    ]


def events_naming(
    events: Iterable[dict[str, Any]], user_id: str, theirs: Collection[str]
) -> list[dict[str, Any]]:
    """The stored audit events (agentd.store.audit_chain.stored_event) concerning the person, each with
    the fields to erase for them under `erase`."""
    found = []
    for event in events:
        fields = audit_fields(event, user_id, theirs)
        if fields:
            found.append({**event, "erase": fields})
    return found


def document(
    conversations: list[dict[str, Any]],
    memories: Iterable[tuple[str, str, float, float]],
    facts: Iterable[tuple[str, str, float, str | None, float, float]],
    episodes: Iterable[tuple[int, str | None, str, float, float, str | None]],
    runs: list[dict[str, Any]],
    approvals: list[dict[str, Any]],
    events: list[dict[str, Any]],
    user_id: str,
    media: Iterable[tuple[str, str, str, str, str | None, int, float]] = (),
) -> dict[str, Any]:
    """One agent's part of a person's export (agentd.store.queries.PersonData)."""
    scope = partition_of(user_id)
    return {
        "conversations": conversations,
        "memories": [
            {"scope": scope, "key": k, "value": v, "created_at": c, "updated_at": u}
            for k, v, c, u in memories
        ],
        "facts": [
            {"key": k, "value": v, "confidence": c, "source": s, "created_at": ca, "updated_at": u}
            for k, v, c, s, ca, u in facts
        ],
        "episodes": [
            {"id": i, "conversation_key": k, "text": t, "created_at": c, "importance": imp, "embedder": e}
            for i, k, t, c, imp, e in episodes
        ],
        # the files they sent and those of their conversations (by hash, as their messages refer to them)
        "media": [
            {
                "conversation_key": k,
                "sha256": h,
                "kind": kind,
                "mime_type": m,
                "filename": f,
                "size": n,
                "created_at": c,
            }
            for k, h, kind, m, f, n, c in media
        ],
        "runs": runs,
        "approvals": approvals,
        "audit_events": [
            {k: e[k] for k in ("seq", "ts", "kind", "action", "conversation_key", "run_id", "data")}
            for e in events
        ],
    }
