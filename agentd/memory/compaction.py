"""Compaction: summarise the older turns, keep the last two turns verbatim, in one transaction.

The purpose (system prompt) is never summarised. The summary is written and
the older rows marked compacted (never deleted) in the same commit as the
compaction's run row and audit event, so a crash or a failed summary call
leaves the transcript exactly as it was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import MemoryContext
from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.runs import insert_run
from agentd.store.transcripts import StoredMessage, StoredThread, apply_compaction

log = logging.getLogger(__name__)

KEEP_TURNS = 2
SUMMARY_INSTRUCTIONS = (
    "You compact a conversation so it can continue in less context. Write a concise summary of the "
    "conversation excerpt below: keep decisions made, facts established, the person's preferences and "
    "requests, open questions and errors met. Write plain text, no preamble."
)


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    status: str  # ok | failed | nothing_to_compact
    run_id: str | None = None
    compacted_messages: int = 0
    error: str | None = None


def verbatim_tail_start(messages: list[StoredMessage], keep_turns: int = KEEP_TURNS) -> int:
    """Index where the last `keep_turns` turns begin (a turn starts at a person's message).

    Cutting only at the start of a turn means a tool call always stays with its result.
    """
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].message.role == "user":
            seen += 1
            if seen == keep_turns:
                return i
    return 0


def render_for_summary(previous_summary: str | None, older: list[StoredMessage]) -> str:
    lines = []
    if previous_summary:
        lines += ["Summary so far:", previous_summary, "", "Later messages:"]
    for stored in older:
        m = stored.message
        for part in m.parts:
            if isinstance(part, TextPart):
                lines.append(f"{m.role}: {part.text}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"assistant called {part.name}({part.arguments})")
            elif isinstance(part, ToolResultPart):
                lines.append(f"tool {part.name} returned: {part.content}")
    return "\n".join(lines)


async def compact_thread(ctx: MemoryContext, thread: StoredThread, reason: str) -> CompactionOutcome:
    """Compact `thread` in place (the caller holds its conversation lock).

    Summarised by model.small when set, else the main model; the purpose is not
    part of what is summarised.
    """
    split = verbatim_tail_start(thread.messages)
    if thread.id is None or split == 0:
        return CompactionOutcome("nothing_to_compact")
    older = thread.messages[:split]
    upto_seq = older[-1].seq
    thread_id = thread.id
    try:
        call = await ctx.call_model(
            trigger="compaction",
            model_ref=ctx.agent_model(small=True),
            system=SUMMARY_INSTRUCTIONS,
            messages=[Message.user(render_for_summary(thread.summary, older))],
            conversation_key=thread.conversation_key,
            thread_id=thread_id,
            purpose="summary",
        )
    except (ProviderError, OperatorError) as e:
        await ctx.audit(
            "compaction",
            "failed",
            conversation_key=thread.conversation_key,
            data={"reason": reason, "error": str(e)},
        )
        log.warning("agent %s: compaction of %s failed: %s", ctx.agent, thread.conversation_key, e)
        return CompactionOutcome("failed", error=str(e))
    summary = call.completion.message.text.strip()
    run = call.run
    if not summary:
        error = "the model returned an empty summary"
        run.status, run.error = "error", error
        audit = AuditRecord(
            "compaction", "failed", thread.conversation_key, run.id, {"reason": reason, "error": error}
        )
        now = time.time()

        def record_failure(conn):  # type: ignore[no-untyped-def]
            insert_run(conn, run)
            insert_audit(conn, ctx.agent, [audit], now)

        await ctx.store.write(record_failure)
        return CompactionOutcome("failed", run.id, error=error)

    audit = AuditRecord(
        "compaction",
        "ok",
        thread.conversation_key,
        run.id,
        {"reason": reason, "upto_seq": upto_seq, "messages": len(older), "summary_chars": len(summary)},
    )
    now = time.time()

    def commit(conn):  # type: ignore[no-untyped-def]
        apply_compaction(conn, thread_id, upto_seq, summary, run.id, now)
        insert_run(conn, run)
        insert_audit(conn, ctx.agent, [audit], now)

    await ctx.store.write(commit)
    thread.summary = summary
    thread.messages = thread.messages[split:]
    thread.last_input_tokens, thread.last_tokens_estimated = None, False
    thread.recount()
    return CompactionOutcome("ok", run.id, len(older))
