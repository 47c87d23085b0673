"""Threads, their messages and their compaction summaries, on PostgreSQL.

Besides what SQLite keeps, a thread row carries `version` (moved by compaction, archive and reset)
and `layers_version` (moved by every memory_state write, here and in memory_state.py): with the next
seq, derived from the messages, they are the ThreadMark a claim reports, so a daemon knows whether its
cached copy only misses a tail or must be read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.messages import dump_message
from agentd.store.claims import Claim, ThreadMark
from agentd.store.postgres.audit import insert_audit
from agentd.store.postgres.deliveries import record_delivery
from agentd.store.postgres.handlers import Cx, Later, handles, rowcount
from agentd.store.postgres.runs import insert_run
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
from agentd.store.writes import (
    AppendAudit,
    ApplyCompaction,
    ArchiveThread,
    CommitTurn,
    DeleteConversation,
    DeleteTranscript,
)

_HEADER = (
    "SELECT t.id, t.last_input_tokens, t.last_tokens_estimated, t.version, t.layers_version,"
    " (SELECT s.text FROM summaries s WHERE s.thread_id = t.id ORDER BY s.id DESC LIMIT 1),"
    " (SELECT max(m.seq) FROM messages m WHERE m.thread_id = t.id)"
    " FROM threads t WHERE t.agent_id = %s AND t.conversation_key = %s AND t.status = 'active'"
)
# what agentd_claim reads under a granted lease (claim_sql.py), read here without one
_MARK = (
    "SELECT th.id, th.version, COALESCE((SELECT max(m.seq) FROM messages m WHERE m.thread_id = th.id), 0) + 1,"
    " th.layers_version, a.memories_version FROM agents a LEFT JOIN threads th"
    " ON th.agent_id = a.id AND th.conversation_key = %s AND th.status = 'active' WHERE a.id = %s"
)
_PAGE = (
    "SELECT seq, body, run_id FROM messages WHERE thread_id = %s AND agent_id = %s AND NOT compacted"
    " AND seq > %s ORDER BY seq LIMIT %s"
)
_ACTIVE_MESSAGES = (
    "SELECT m.seq, m.body, m.run_id FROM threads t JOIN messages m ON m.thread_id = t.id"
    " WHERE t.agent_id = %s AND t.conversation_key = %s AND t.status = 'active' AND NOT m.compacted"
    " ORDER BY m.seq"
)


def _thread(conversation_key: str, row: tuple[Any, ...] | None) -> StoredThread:
    thread = StoredThread(conversation_key)
    if row is None:
        return thread
    thread_id, last_tokens, estimated, version, layers_version, summary, last_seq = row
    thread.id, thread.last_input_tokens, thread.last_tokens_estimated = thread_id, last_tokens, estimated
    thread.version, thread.layers_version = version, layers_version
    thread.summary = summary
    thread.next_seq = (last_seq or 0) + 1
    thread.chars = len(summary or "")
    return thread


@handles(ThreadHeader)
def load_thread_header(cx: Cx, q: ThreadHeader) -> Later[StoredThread]:
    cur = cx.run(_HEADER, (cx.agent_id, q.conversation_key))
    return Later(lambda: _thread(q.conversation_key, cur.fetchone()))


@handles(ConversationMark)
def conversation_mark(cx: Cx, q: ConversationMark) -> Later[Claim]:
    cur = cx.run(_MARK, (q.conversation_key, cx.agent_id))

    def read() -> Claim:
        row = cur.fetchone()
        assert row is not None  # (the agent's own row)
        thread_id, version, next_seq, layers, memories = row
        return Claim(None, ThreadMark(thread_id, version or 0, next_seq, layers or 0), memories)

    return Later(read)


@handles(ActiveThread, statements=2)
def load_active_thread(cx: Cx, q: ActiveThread) -> Later[StoredThread]:
    header = cx.run(_HEADER, (cx.agent_id, q.conversation_key))
    messages = cx.run(_ACTIVE_MESSAGES, (cx.agent_id, q.conversation_key))

    def read() -> StoredThread:
        thread = _thread(q.conversation_key, header.fetchone())
        thread.messages = stored_messages(messages.fetchall())
        thread.recount()
        return thread

    return Later(read)


@handles(MessagesPage)
def load_messages_page(cx: Cx, q: MessagesPage) -> Later[list[StoredMessage]]:
    cur = cx.run(_PAGE, (q.thread_id, cx.agent_id, q.after_seq, q.limit))
    return Later(lambda: stored_messages(cur.fetchall()))


@handles(CommitTurn, reads_midway=lambda op: op.thread_id is None and bool(op.messages))
def commit_turn(cx: Cx, op: CommitTurn) -> int | None:
    thread_id = op.thread_id
    if op.messages:
        if thread_id is None:  # the conversation's first message: its thread id is read at once
            found = cx.run(
                "INSERT INTO threads (agent_id, conversation_key, created_at) VALUES (%s, %s, %s) RETURNING id",
                (cx.agent_id, op.conversation_key, op.now),
            ).fetchone()
            assert found is not None
            thread_id = found[0]
        insert_messages(cx, thread_id, op.messages, op.now)
        if op.usage is not None:
            cx.run(
                "UPDATE threads SET last_input_tokens = %s, last_tokens_estimated = %s"
                " WHERE id = %s AND agent_id = %s",
                (op.usage[0], op.usage[1], thread_id, cx.agent_id),
            )
    insert_run(cx, op.run, thread_id=thread_id)
    if op.delivery is not None:
        d = op.delivery
        record_delivery(cx, d.channel, d.event_id, d.conversation_key, op.run.id, op.now)
    return thread_id


_MESSAGE_COLUMNS = "INSERT INTO messages (agent_id, thread_id, seq, role, user_id, body, run_id, created_at)"
FEW_MESSAGES = 8  # a turn's: one VALUES row each (cheaper to send than arrays); more go as arrays


def insert_messages(cx: Cx, thread_id: int | None, ms: Sequence[StoredMessage], now: float) -> None:
    rows = [(m.seq, m.message.role, m.message.user_id, dump_message(m.message), m.run_id) for m in ms]
    if len(rows) <= FEW_MESSAGES:
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        cx.run(
            f"{_MESSAGE_COLUMNS} VALUES {values}",
            [v for r in rows for v in (cx.agent_id, thread_id, *r, now)],
        )
        return
    cx.run(
        f"{_MESSAGE_COLUMNS} SELECT %s, %s, x.seq, x.role, x.user_id, x.body, x.run_id, %s"
        " FROM unnest(%s::integer[], %s::text[], %s::text[], %s::text[], %s::text[])"
        " AS x(seq, role, user_id, body, run_id)",
        (cx.agent_id, thread_id, now, *(list(column) for column in zip(*rows, strict=True))),
    )


@handles(ApplyCompaction)
def apply_compaction(cx: Cx, op: ApplyCompaction) -> Later[int]:
    cx.run(
        "INSERT INTO summaries (agent_id, thread_id, upto_seq, text, run_id, created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (cx.agent_id, op.thread_id, op.upto_seq, op.summary, op.run_id, op.now),
    )
    marked = cx.run(
        "UPDATE messages SET compacted = true WHERE thread_id = %s AND agent_id = %s AND seq <= %s"
        " AND NOT compacted",
        (op.thread_id, cx.agent_id, op.upto_seq),
    )
    cx.run(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = false, version = version + 1"
        " WHERE id = %s AND agent_id = %s",
        (op.thread_id, cx.agent_id),
    )
    return rowcount(marked)


@handles(ArchiveThread)
def archive_thread(cx: Cx, op: ArchiveThread) -> None:
    cx.run(
        "UPDATE threads SET status = 'archived', ended_at = %s, version = version + 1"
        " WHERE id = %s AND agent_id = %s",
        (op.now, op.thread_id, cx.agent_id),
    )


@handles(DeleteTranscript)
def delete_transcript(cx: Cx, op: DeleteTranscript) -> Later[int]:
    scope = (op.thread_id, cx.agent_id)
    deleted = cx.run("DELETE FROM messages WHERE thread_id = %s AND agent_id = %s", scope)
    cx.run("DELETE FROM summaries WHERE thread_id = %s AND agent_id = %s", scope)
    cx.run("DELETE FROM memory_state WHERE thread_id = %s AND agent_id = %s", scope)
    cx.run(
        "UPDATE threads SET last_input_tokens = NULL, last_tokens_estimated = false,"
        " version = version + 1, layers_version = layers_version + 1 WHERE id = %s AND agent_id = %s",
        scope,
    )
    return rowcount(deleted)


@handles(DeleteConversation, reads_midway=lambda op: True)
def delete_conversation(cx: Cx, op: DeleteConversation) -> dict[str, int]:
    """As on SQLite; the counts are read before the batch goes on (its audit row says them)."""
    threads = "SELECT id FROM threads WHERE agent_id = %s AND conversation_key = %s"
    scope = (cx.agent_id, op.conversation_key)
    messages = cx.run(f"DELETE FROM messages WHERE thread_id IN ({threads}) RETURNING 1", scope)
    for table in ("summaries", "memory_state"):
        cx.run(f"DELETE FROM {table} WHERE thread_id IN ({threads})", scope)  # type: ignore[arg-type]
    gone = cx.run("DELETE FROM threads WHERE agent_id = %s AND conversation_key = %s RETURNING 1", scope)
    # its files go with it: nothing refers to them any more (the audit row says how many)
    media = cx.run("DELETE FROM media WHERE agent_id = %s AND conversation_key = %s RETURNING 1", scope)
    deleted = {"threads": len(gone.fetchall()), "messages": len(messages.fetchall())}
    files = len(media.fetchall())
    if deleted["threads"]:
        said = {**deleted, **({"media": files} if files else {}), "by": op.by}
        audit = AuditRecord("conversation", "delete", op.conversation_key, None, said)
        insert_audit(cx, AppendAudit(op.agent, [audit], op.ts, op.daemon))
    return deleted


@handles(MessageCounts)
def count_messages(cx: Cx, q: MessageCounts) -> Later[dict[str, int]]:
    cur = cx.run(
        "SELECT count(m.seq), count(m.seq) FILTER (WHERE m.compacted),"
        " (SELECT count(*) FROM threads a WHERE a.agent_id = %s AND a.conversation_key = %s"
        "  AND a.status = 'archived')"
        " FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.agent_id = %s AND t.conversation_key = %s AND t.status = 'active'",
        (cx.agent_id, q.conversation_key, cx.agent_id, q.conversation_key),
    )

    def read() -> dict[str, int]:
        row = cur.fetchone()
        assert row is not None
        return {"messages": row[0], "compacted": row[1], "archived_threads": row[2]}

    return Later(read)


@handles(ThreadHistory)
def list_thread_history(cx: Cx, q: ThreadHistory) -> Later[list[dict[str, Any]]]:
    where, args = ("AND t.conversation_key = %s", (q.conversation_key,)) if q.conversation_key else ("", ())
    cur = cx.run(
        "SELECT t.id, t.conversation_key, t.status, m.seq, m.role, m.user_id, m.run_id, m.compacted"
        f" FROM threads t LEFT JOIN messages m ON m.thread_id = t.id WHERE t.agent_id = %s {where}"
        " ORDER BY t.id, m.seq",
        (cx.agent_id, *args),
    )
    return Later(lambda: thread_history(cur.fetchall()))


@handles(Conversations)
def list_conversations(cx: Cx, q: Conversations) -> Later[list[dict[str, Any]]]:
    cur = cx.run(
        "SELECT t.conversation_key, t.id, t.created_at, count(m.seq), max(m.created_at)"
        " FROM threads t LEFT JOIN messages m ON m.thread_id = t.id"
        " WHERE t.agent_id = %s AND t.status = 'active'"
        " GROUP BY t.id ORDER BY max(m.created_at) DESC NULLS LAST, t.id DESC LIMIT %s OFFSET %s",
        (cx.agent_id, q.limit, q.offset),
    )
    return Later(
        lambda: [
            {"conversation_key": k, "thread_id": tid, "created_at": c, "messages": n, "last_message_at": last}
            for k, tid, c, n, last in cur.fetchall()
        ]
    )
