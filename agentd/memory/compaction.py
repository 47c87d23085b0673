"""Compaction: summarise the older turns, keep the last two turns verbatim, in one transaction.

The purpose (system prompt) is never summarised. The summary is written and
the older rows marked compacted (never deleted) in the same commit as the
compaction's run row and audit event, so a crash or a failed summary call
leaves the transcript exactly as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from agentd.errors import CONTEXT_OVERFLOW, OperatorError, ProviderError
from agentd.memory.base import MemoryContext
from agentd.memory.pieces import DoesNotFit, budget_chars, summarise_fitting
from agentd.memory.runs import commit_memory_run
from agentd.messages import Message, render_transcript
from agentd.providers.remembered import remembered_block
from agentd.providers.windows import learn
from agentd.store.records import AuditRecord, RunRecord, StoredMessage, StoredThread
from agentd.store.writes import ApplyCompaction

log = logging.getLogger(__name__)

KEEP_TURNS = 2


def summary_heading(how: str) -> str:
    """The heading above a summary of the conversation's earlier part, saying how it was made (the
    compaction's here, summarized's rolling one): the model reads both as the same kind of thing."""
    return f"Summary of the earlier part of this conversation ({how})."


COMPACTED_HEADING = summary_heading("older turns were compacted")
SUMMARY_INSTRUCTIONS = (
    "You compact a conversation so it can continue in less context. Write a concise summary of the "
    "conversation excerpt below: keep decisions made, facts established, the person's preferences and "
    "requests, open questions and errors met. Write plain text, no preamble."
)


def compacted_section(summary: str) -> str:
    """The compaction summary as the model sees it: quoted as remembered material."""
    return remembered_block("compaction summary", COMPACTED_HEADING, summary)


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    status: str  # ok | failed | nothing_to_compact
    run_id: str | None = None
    compacted_messages: int = 0
    error: str | None = None


def verbatim_tail_start(messages: Sequence[StoredMessage], keep_turns: int = KEEP_TURNS) -> int:
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


def render_for_summary(previous_summary: str | None, older: Sequence[StoredMessage]) -> str:
    """What a summary model reads: the summary so far (if any), then the messages to take in."""
    text = render_transcript(m.message for m in older)
    return f"Summary so far:\n{previous_summary}\n\nLater messages:\n{text}" if previous_summary else text


async def compact_thread(
    ctx: MemoryContext,
    thread: StoredThread,
    reason: str,
    *,
    keep_turns: int = KEEP_TURNS,
) -> CompactionOutcome:
    """Compact `thread` in place (the caller holds its conversation lock), keeping its last
    `keep_turns` turns verbatim (0 in an overflow's recovery: the turn being answered is not in the
    thread yet).

    Summarised by model.small when set, else the main model; the purpose is not part of what is
    summarised. No summary call carries more than the summary model's window (configured,
    learned or known: MemoryContext.model_window): a longer excerpt is summarised in pieces, then
    their summaries (memory.pieces), each call a run of its own, all committed with the compaction.
    """
    split = verbatim_tail_start(thread.messages, keep_turns) if keep_turns else len(thread.messages)
    if thread.id is None or split == 0:
        return CompactionOutcome("nothing_to_compact")
    older = thread.messages[:split]
    upto_seq = older[-1].seq
    thread_id = thread.id
    model_ref = ctx.agent_model(small=True)
    budget = budget_chars(ctx.model_window(model_ref), SUMMARY_INSTRUCTIONS)
    runs: list[RunRecord] = []

    async def summarise(text: str) -> str:
        call = await ctx.call_model(
            trigger="compaction",
            model_ref=model_ref,
            system=SUMMARY_INSTRUCTIONS,
            messages=[Message.user(text)],
            conversation_key=thread.conversation_key,
            thread_id=thread_id,
            purpose="summary",
        )
        runs.append(call.run)
        written = call.completion.message.text.strip()
        if not written:
            call.run.status, call.run.error = "error", "the model returned an empty summary"
            raise DoesNotFit(call.run.error)
        return written

    text = render_for_summary(thread.summary, older)
    try:
        try:
            summary, calls = await summarise_fitting(text, budget, summarise)
        except ProviderError as e:
            if e.reason != CONTEXT_OVERFLOW:
                raise
            # the summariser's window was unknown or wrong, and its refusal says it (else: half of
            # what the longest call carried); tried once more, in pieces that fit
            taught = learn(model_ref, str(e))
            sent = min(len(text), budget or len(text))
            budget = budget_chars(taught, SUMMARY_INSTRUCTIONS) if taught else sent // 2
            summary, calls = await summarise_fitting(text, budget, summarise)
    except (ProviderError, OperatorError, DoesNotFit) as e:
        # a failed call's run was recorded by call_model; the pieces summarised before it are kept as runs
        audit = AuditRecord(
            "compaction",
            "failed",
            thread.conversation_key,
            runs[-1].id if runs else None,
            {"reason": reason, "error": str(e)},
        )
        await commit_memory_run(ctx, runs=runs, audits=[audit])
        log.warning("agent %s: compaction of %s failed: %s", ctx.agent, thread.conversation_key, e)
        return CompactionOutcome("failed", runs[-1].id if runs else None, error=str(e))

    run = runs[-1]
    data = {"reason": reason, "upto_seq": upto_seq, "messages": len(older), "summary_chars": len(summary)}
    if calls > 1:
        data["calls"] = calls  # summarised in pieces: the excerpt was longer than the summariser's window
    audit = AuditRecord("compaction", "ok", thread.conversation_key, run.id, data)
    compaction = ApplyCompaction(thread_id, upto_seq, summary, run.id, time.time())
    committed = await commit_memory_run(ctx, produced=[compaction], runs=runs, audits=[audit])
    [written] = committed.produced
    assert isinstance(written, ApplyCompaction)
    thread.summary = written.summary  # as stored: secrets redacted
    thread.messages = thread.messages[split:]
    thread.last_input_tokens, thread.last_tokens_estimated = None, False
    thread.recount()
    return CompactionOutcome("ok", run.id, len(older))
