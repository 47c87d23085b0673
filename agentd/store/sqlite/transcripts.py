"""Threads, their messages and their compaction summaries."""

from __future__ import annotations

import sqlite3
from typing import Any

from agentd.messages import dump_message
from agentd.store.claims import Claim
from agentd.store.queries import (
    ActiveThread,
    ConversationMark,
    Conversations,
    MessageCounts,
    MessagesPage,
    ThreadHeader,
    ThreadHistory,
)
from agentd.store.records import AuditRecord, StoredMessage, StoredThread, stored_messages, thread_history
from agentd.store.sqlite.audit import insert_audit
from agentd.store.sqlite.deliveries import record_delivery
from agentd.store.sqlite.handlers import handles
from agentd.store.sqlite.runs import insert_run
from agentd.store.writes import (
    AppendAudit,
    ApplyCompaction,
    ArchiveThread,
    CommitTurn,
    DeleteConversation,
    DeleteTranscript,
    RecordDelivery,
)


@handles(ActiveThread)
def load_active_thread(conn: sqlite3.Connection, q: ActiveThread) -> StoredThread:
    thread = load_thread_header(conn, ThreadHeader(q.conversation_key))
    if thread.id is not None:
        thread.messages = load_messages_page(conn, MessagesPage(thread.id, 0, None))
        thread.recount()
    return thread


@handles(ThreadHeader)
def load_thread_header(conn: sqlite3.Connection, q: ThreadHeader) -> StoredThread:
    row = conn.execute(
        "SELECT id, last_input_tokens, last_tokens_estimated FROM threads"
        " WHERE conversation_key = ? AND status = 'active'",
        (q.conversation_key,),
    ).fetchone()
    thread = StoredThread(q.conversation_key)
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


@handles(ConversationMark)
def conversation_mark(conn: sqlite3.Connection, q: ConversationMark) -> Claim:
    return Claim()  # this daemon owns the file (its folder lock): its cached copies are never stale


@handles(MessagesPage)
def load_messages_page(conn: sqlite3.Connection, q: MessagesPage) -> list[StoredMessage]:
    return stored_messages(
        conn.execute(
            "SELECT seq, body, run_id FROM messages WHERE thread_id = ? AND compacted = 0 AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (q.thread_id, q.after_seq, -1 if q.limit is None else q.limit),
        ).fetchall()
    )


@handles(CommitTurn)
def commit_turn(conn: sqlite3.Connection, op: CommitTurn) -> int | None:
    thread_id = op.thread_id
    if op.messages:
        if thread_id is None:
            cur = conn.execute(
                "INSERT INTO threads (conversation_key, status, created_at) VALUES (?, 'active', ?)",
                (op.conversation_key, op.now),
            )
            thread_id = cur.lastrowid
        conn.executemany(
            "INSERT INTO messages (thread_id, seq, role, user_id, body, run_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    thread_id,
                    m.seq,
                    m.message.role,
                    m.message.user_id,
                    dump_message(m.message),
                    m.run_id,
                    op.now,
                )
                for m in op.messages
            ],
        )
        if op.usage is not None:
            conn.execute(
                "UPDATE threads SET last_input_tokens = ?, last_tokens_estimated = ? WHERE id = ?",
                (op.usage[0], int(op.usage[1]), thread_id),
            )
    insert_run(conn, op.run, thread_id=thread_id)
    if op.delivery is not None:
        record_delivery(conn, RecordDelivery(op.delivery, op.run.id, op.now))
    return thread_id


@handles(ApplyCompaction)
def apply_compaction(conn: sqlite3.Connection, op: ApplyCompaction) -> int:
    conn.execute(
        "INSERT INTO summaries (thread_id, upto_seq, text, run_id, created_at) VALUES (?, ?, ?, ?, ?)",
        (op.thread_id, op.upto_seq, op.summary, op.run_id, op.now),
    )
    cur = conn.execute(
        "UPDATE messages SET compacted = 1 WHERE thread_id = ? AND seq <= ? AND compacted = 0",
        (op.thread_id, op.upto_seq),
    )
    conn.execute(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = 0 WHERE id = ?", (op.thread_id,)
    )
    return cur.rowcount


@handles(ArchiveThread)
def archive_thread(conn: sqlite3.Connection, op: ArchiveThread) -> None:
    conn.execute("UPDATE threads SET status = 'archived', ended_at = ? WHERE id = ?", (op.now, op.thread_id))


@handles(DeleteTranscript)
def delete_transcript(conn: sqlite3.Connection, op: DeleteTranscript) -> int:
    cur = conn.execute("DELETE FROM messages WHERE thread_id = ?", (op.thread_id,))
    conn.execute("DELETE FROM summaries WHERE thread_id = ?", (op.thread_id,))
    conn.execute("DELETE FROM memory_state WHERE thread_id = ?", (op.thread_id,))
    conn.execute(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = 0 WHERE id = ?", (op.thread_id,)
    )
    return cur.rowcount


@handles(DeleteConversation)
def delete_conversation(conn: sqlite3.Connection, op: DeleteConversation) -> dict[str, int]:
    threads = "SELECT id FROM threads WHERE conversation_key = ?"
    key = (op.conversation_key,)
    messages = conn.execute(f"DELETE FROM messages WHERE thread_id IN ({threads})", key).rowcount
    for table in ("summaries", "memory_state"):
        conn.execute(f"DELETE FROM {table} WHERE thread_id IN ({threads})", key)
    deleted = {"threads": conn.execute("DELETE FROM threads WHERE conversation_key = ?", key).rowcount}
    deleted["messages"] = messages
    # its files go with it: nothing refers to them any more (the audit row says how many)
    files = conn.execute("DELETE FROM media WHERE conversation_key = ?", key).rowcount
    if deleted["threads"]:
        said = {**deleted, **({"media": files} if files else {}), "by": op.by}
        audit = AuditRecord("conversation", "delete", op.conversation_key, None, said)
        insert_audit(conn, AppendAudit(op.agent, [audit], op.ts, op.daemon))
    return deleted


@handles(MessageCounts)
def count_messages(conn: sqlite3.Connection, q: MessageCounts) -> dict[str, int]:
    row = conn.execute(
        "SELECT COUNT(m.id), COALESCE(SUM(m.compacted), 0) FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.conversation_key = ? AND t.status = 'active'",
        (q.conversation_key,),
    ).fetchone()
    archived = conn.execute(
        "SELECT COUNT(*) FROM threads WHERE conversation_key = ? AND status = 'archived'",
        (q.conversation_key,),
    ).fetchone()[0]
    return {"messages": row[0], "compacted": row[1], "archived_threads": archived}


@handles(ThreadHistory)
def list_thread_history(conn: sqlite3.Connection, q: ThreadHistory) -> list[dict[str, Any]]:
    where, args = ("WHERE t.conversation_key = ?", (q.conversation_key,)) if q.conversation_key else ("", ())
    return thread_history(
        conn.execute(
            "SELECT t.id, t.conversation_key, t.status, m.seq, m.role, m.user_id, m.run_id, m.compacted"
            f" FROM threads t LEFT JOIN messages m ON m.thread_id = t.id {where} ORDER BY t.id, m.seq",
            args,
        ).fetchall()
    )


@handles(Conversations)
def list_conversations(conn: sqlite3.Connection, q: Conversations) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT t.conversation_key, t.id, t.created_at, COUNT(m.id), MAX(m.created_at)"
        " FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.status = 'active' GROUP BY t.id ORDER BY MAX(m.created_at) DESC, t.id DESC LIMIT ? OFFSET ?",
        (q.limit, q.offset),
    ).fetchall()
    return [
        {"conversation_key": k, "thread_id": tid, "created_at": c, "messages": n, "last_message_at": last}
        for k, tid, c, n, last in rows
    ]
