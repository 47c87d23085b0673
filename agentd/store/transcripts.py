"""Threads, their messages and their compaction summaries."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from agentd.messages import Message, dump_message, load_message


@dataclass(slots=True)
class StoredMessage:
    seq: int
    message: Message
    run_id: str | None = None


@dataclass(slots=True)
class StoredThread:
    """The active thread of a conversation as the model will see it: summary + uncompacted messages."""

    conversation_key: str
    id: int | None = None
    summary: str | None = None
    messages: list[StoredMessage] = field(default_factory=list)
    next_seq: int = 1
    last_input_tokens: int | None = None
    last_tokens_estimated: bool = False
    # characters the model reads for summary + messages: the base of token estimates, kept
    # incrementally so an estimate never walks a long thread.
    chars: int = 0
    # per memory layer: what the strategy caches for this thread (loaded from memory_state)
    layers: dict[str, Any] = field(default_factory=dict)

    def recount(self) -> None:
        self.chars = len(self.summary or "") + sum(m.message.char_count() for m in self.messages)


def load_active_thread(conn: sqlite3.Connection, conversation_key: str) -> StoredThread:
    """The active thread with all its uncompacted messages, in one go (tools, tests, small threads)."""
    thread = load_thread_header(conn, conversation_key)
    if thread.id is not None:
        thread.messages = load_messages_page(conn, thread.id, 0, None)
        thread.recount()
    return thread


def load_thread_header(conn: sqlite3.Connection, conversation_key: str) -> StoredThread:
    """The active thread's row and summary, without its messages (see load_messages_page)."""
    row = conn.execute(
        "SELECT id, last_input_tokens, last_tokens_estimated FROM threads"
        " WHERE conversation_key = ? AND status = 'active'",
        (conversation_key,),
    ).fetchone()
    thread = StoredThread(conversation_key)
    if row is None:
        return thread
    thread.id, thread.last_input_tokens, thread.last_tokens_estimated = row[0], row[1], bool(row[2])
    summary = conn.execute(
        "SELECT text FROM summaries WHERE thread_id = ? ORDER BY id DESC LIMIT 1", (thread.id,)
    ).fetchone()
    thread.summary = summary[0] if summary else None
    last = conn.execute("SELECT MAX(seq) FROM messages WHERE thread_id = ?", (thread.id,)).fetchone()[0]
    thread.next_seq = (last or 0) + 1
    thread.chars = len(thread.summary or "")
    return thread


def load_messages_page(
    conn: sqlite3.Connection, thread_id: int, after_seq: int, limit: int | None
) -> list[StoredMessage]:
    """Uncompacted messages with seq > after_seq, in order; at most `limit` (None: all)."""
    return [
        StoredMessage(seq, load_message(body), run_id)
        for seq, body, run_id in conn.execute(
            "SELECT seq, body, run_id FROM messages WHERE thread_id = ? AND compacted = 0 AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (thread_id, after_seq, -1 if limit is None else limit),
        )
    ]


def create_thread(conn: sqlite3.Connection, conversation_key: str, now: float) -> int:
    cur = conn.execute(
        "INSERT INTO threads (conversation_key, status, created_at) VALUES (?, 'active', ?)",
        (conversation_key, now),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid


def append_messages(
    conn: sqlite3.Connection, thread_id: int, messages: list[StoredMessage], now: float
) -> None:
    conn.executemany(
        "INSERT INTO messages (thread_id, seq, role, user_id, body, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (thread_id, m.seq, m.message.role, m.message.user_id, dump_message(m.message), m.run_id, now)
            for m in messages
        ],
    )


def set_thread_usage(conn: sqlite3.Connection, thread_id: int, tokens: int | None, estimated: bool) -> None:
    conn.execute(
        "UPDATE threads SET last_input_tokens = ?, last_tokens_estimated = ? WHERE id = ?",
        (tokens, int(estimated), thread_id),
    )


def apply_compaction(
    conn: sqlite3.Connection, thread_id: int, upto_seq: int, summary: str, run_id: str, now: float
) -> int:
    """Write the summary and mark every message up to `upto_seq` compacted; rows are kept."""
    conn.execute(
        "INSERT INTO summaries (thread_id, upto_seq, text, run_id, created_at) VALUES (?, ?, ?, ?, ?)",
        (thread_id, upto_seq, summary, run_id, now),
    )
    cur = conn.execute(
        "UPDATE messages SET compacted = 1 WHERE thread_id = ? AND seq <= ? AND compacted = 0",
        (thread_id, upto_seq),
    )
    conn.execute(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = 0 WHERE id = ?", (thread_id,)
    )
    return cur.rowcount


def archive_thread(conn: sqlite3.Connection, thread_id: int, now: float) -> None:
    conn.execute("UPDATE threads SET status = 'archived', ended_at = ? WHERE id = ?", (now, thread_id))


def delete_transcript(conn: sqlite3.Connection, thread_id: int) -> int:
    """Delete a thread's messages and summaries (the thread row stays, empty); returns messages deleted."""
    cur = conn.execute("DELETE FROM messages WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM summaries WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM memory_state WHERE thread_id = ?", (thread_id,))
    conn.execute(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = 0 WHERE id = ?", (thread_id,)
    )
    return cur.rowcount


def count_messages(conn: sqlite3.Connection, conversation_key: str) -> dict[str, int]:
    """Messages of the conversation's active thread: total, compacted, archived threads."""
    row = conn.execute(
        "SELECT COUNT(m.id), COALESCE(SUM(m.compacted), 0) FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.conversation_key = ? AND t.status = 'active'",
        (conversation_key,),
    ).fetchone()
    archived = conn.execute(
        "SELECT COUNT(*) FROM threads WHERE conversation_key = ? AND status = 'archived'", (conversation_key,)
    ).fetchone()[0]
    return {"messages": row[0], "compacted": row[1], "archived_threads": archived}


def list_conversations(conn: sqlite3.Connection, limit: int = 200) -> list[dict[str, object]]:
    rows = conn.execute(
        "SELECT t.conversation_key, t.id, t.created_at, COUNT(m.id), MAX(m.created_at)"
        " FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.status = 'active' GROUP BY t.id ORDER BY MAX(m.created_at) DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [
        {"conversation_key": k, "thread_id": tid, "created_at": c, "messages": n, "last_message_at": last}
        for k, tid, c, n, last in rows
    ]
