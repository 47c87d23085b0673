"""Compaction: summarise the older turns, keep the last two turns verbatim, in one transaction.

The purpose (system prompt) is never summarised. The summary is written and
the older rows marked compacted (never deleted) in the same commit as the
compaction's run row and audit event, so a crash or a failed summary call
leaves the transcript exactly as it was.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from agentd.errors import ProviderError
from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart, estimate_tokens
from agentd.providers.base import CompletionRequest, ModelProvider
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.db import AgentStore
from agentd.store.runs import RunRecord, insert_run
from agentd.store.transcripts import StoredMessage, StoredThread, apply_compaction

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


async def compact_thread(
    *,
    store: AgentStore,
    agent: str,
    thread: StoredThread,
    provider: ModelProvider,
    model_ref: str,
    model_name: str,
    reason: str,
) -> CompactionOutcome:
    """Compact `thread` in place (the caller holds the conversation's lock)."""
    split = verbatim_tail_start(thread.messages)
    if thread.id is None or split == 0:
        return CompactionOutcome("nothing_to_compact")
    older = thread.messages[:split]
    upto_seq = older[-1].seq
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=thread.conversation_key,
        trigger="compaction",
        model=model_ref,
        status="ok",
        started_at=time.time(),
        thread_id=thread.id,
    )
    request = CompletionRequest(
        model=model_name,
        system=SUMMARY_INSTRUCTIONS,
        messages=[Message.user(render_for_summary(thread.summary, older))],
        purpose="summary",
    )
    audit = AuditRecord("compaction", "ok", thread.conversation_key, run.id, {"reason": reason})
    summary = ""
    try:
        completion = await provider.complete(request)
        summary = completion.message.text.strip()
        if not summary:
            raise ProviderError(
                "returned an empty summary", provider=model_ref.split("/")[0], model=model_name
            )
        run.model_calls = 1
        if completion.usage is not None:
            run.input_tokens, run.output_tokens = (
                completion.usage.input_tokens,
                completion.usage.output_tokens,
            )
        else:
            run.input_tokens = estimate_tokens(len(request.system) + request.messages[0].char_count())
            run.output_tokens = estimate_tokens(len(summary))
            run.tokens_estimated = True
    except ProviderError as e:
        run.status, run.error = "error", str(e)
        audit.action = "failed"
        audit.data["error"] = str(e)
    run.duration_ms = (time.time() - run.started_at) * 1000
    now = time.time()

    if run.status == "ok":
        audit.data.update({"upto_seq": upto_seq, "messages": len(older), "summary_chars": len(summary)})
        assert thread.id is not None
        thread_id = thread.id

        def commit(conn):  # type: ignore[no-untyped-def]
            apply_compaction(conn, thread_id, upto_seq, summary, run.id, now)
            insert_run(conn, run)
            insert_audit(conn, agent, [audit], now)

        await store.write(commit)
        thread.summary = summary
        thread.messages = thread.messages[split:]
        thread.last_input_tokens, thread.last_tokens_estimated = None, False
        thread.recount()
        return CompactionOutcome("ok", run.id, len(older))

    def record_failure(conn):  # type: ignore[no-untyped-def]
        insert_run(conn, run)
        insert_audit(conn, agent, [audit], now)

    await store.write(record_failure)
    return CompactionOutcome("failed", run.id, error=run.error)
