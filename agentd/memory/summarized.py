"""summarized — a rolling summary refreshed every `every` messages, plus the messages since.

The summary and its cursor (`upto_seq`, the last message it has taken in) are
this layer's row in memory_state. The latest turn (from the person's last
message on) always stays verbatim, so an answer still sees the exchange it
follows; the messages between the cursor and that turn are the foldable ones,
and once `every` of them have gathered a refresh folds them into the summary
and moves the cursor to the end of them. So the summary is refreshed every
`every` messages and the model sees it plus the messages since (between one
turn and `every` + one turn of them). Cutting only at the start of a turn
means a tool call always stays with its result.

The refresh is a run of its own (trigger `summary`): the new summary, the
moved cursor, the run row and the audit event are one transaction. A refresh
that fails keeps the old summary and the cursor where it was (the messages
stay visible verbatim) and is audited; it is tried again once more messages
have arrived, not on every turn.

The model: `model`, else agentd.yaml's memory_extractor_model, else the
agent's own non-offline model (MemoryContext.memory_model) — and when none of
those exists, the agent's small model even when it is the built-in `offline`
one: unlike folds and extraction, a summary is something the offline model
can write (an extractive one), so the layer keeps working without a network.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentd.config.models import MemorySpec
from agentd.config.strategies import SummarizedStrategy
from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import MemoryContext, MemoryView, TurnInput
from agentd.memory.compaction import (
    compacted_section,
    render_for_summary,
    summary_heading,
    verbatim_tail_start,
)
from agentd.memory.cursor import after_cursor, layer_state
from agentd.memory.erasure import Erasure
from agentd.memory.runs import commit_memory_run
from agentd.messages import MESSAGE_ADAPTER, Message
from agentd.providers.base import PromptHints
from agentd.providers.remembered import remembered_block
from agentd.store.records import AuditRecord, LayerState, StoredMessage, StoredThread

log = logging.getLogger(__name__)

SUMMARY_HEADING = summary_heading("a rolling summary; the messages since follow")
REFRESH_INSTRUCTIONS = (
    "You keep a running summary of a conversation so it can continue without its older messages. "
    "Rewrite the summary so far to take in the later messages below: keep decisions made, facts "
    "established, the person's preferences and requests, open questions and errors met; drop what "
    "no longer matters. Write plain text, no preamble."
)
# LayerState.transient key: the last message seq when a refresh failed (retry once newer ones arrive)
FAILED_AT = "failed_at_seq"


def foldable(messages: Sequence[StoredMessage], upto_seq: int) -> list[StoredMessage]:
    """The messages after the cursor and before the latest turn: what a refresh folds in."""
    pending = messages[after_cursor(messages, upto_seq) :]
    return list(pending[: verbatim_tail_start(pending, keep_turns=1)])


def count_foldable(messages: Sequence[StoredMessage], upto_seq: int, enough: int) -> int:
    """len(foldable(...)), walking back from the end and stopping at `enough` (settle_due is cheap)."""
    count, in_latest_turn = 0, True
    for stored in reversed(messages):
        if stored.seq <= upto_seq:
            break
        if in_latest_turn:
            in_latest_turn = stored.message.role != "user"
            continue
        count += 1
        if count >= enough:
            break
    return count


class SummarizedMemory:
    kind = "summarized"
    # the rolling summary is made of the thread's messages: an erasure there deletes it (refolded anew)
    LAYER_KEYS: ClassVar[Mapping[str, Erasure]] = {"summary": Erasure.REBUILD}
    keeps_transcript = True

    def __init__(self, spec: SummarizedStrategy, memory: MemorySpec | None = None, layer: str = "summarized"):
        self.every = spec.every
        self.model = spec.model
        self.layer = layer

    def model_ref(self, ctx: MemoryContext) -> str:
        return ctx.memory_model(self.model) or ctx.agent_model(small=True)

    # -- the seam ---------------------------------------------------------------------

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        state = await layer_state(ctx, thread, self.layer)
        summary = state.data.get("summary")
        sections = []
        if summary:
            sections.append(remembered_block("rolling summary", SUMMARY_HEADING, summary))
        if thread.summary:  # a hand-made /compact of the same thread
            sections.append(compacted_section(thread.summary))
        shown = [m.message for m in thread.messages[after_cursor(thread.messages, state.upto_seq) :]]
        chars = sum(len(s) for s in sections) + sum(m.char_count() for m in shown)
        hints = PromptHints(summary=bool(sections))
        return MemoryView(system_sections=sections, messages=shown, chars=chars, hints=hints)

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        # what follows the cursor: the view shows it, a refresh folds it; the summary holds the rest
        return (await layer_state(ctx, thread, self.layer)).upto_seq + 1

    def pending_in_view(self, thread: StoredThread) -> int:
        state = thread.layers.get(self.layer)
        return 0 if state is None else len(thread.messages) - after_cursor(thread.messages, state.upto_seq)

    def settle_due(self, thread: StoredThread) -> bool:
        state = thread.layers.get(self.layer)
        if state is None:
            # not loaded yet (a restart): settle() loads the cursor and decides
            return len(thread.messages) >= self.every
        if count_foldable(thread.messages, state.upto_seq, self.every) < self.every:
            return False
        failed_at = state.transient.get(FAILED_AT)
        return failed_at is None or thread.messages[-1].seq > failed_at

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        await layer_state(ctx, thread, self.layer)
        if self.settle_due(thread):
            await self.refresh(ctx, thread)

    async def refresh(self, ctx: MemoryContext, thread: StoredThread) -> bool:
        """Fold the pending messages into the summary; True when the summary moved."""
        state = await layer_state(ctx, thread, self.layer)
        chunk = foldable(thread.messages, state.upto_seq)
        if thread.id is None or not chunk:
            return False
        upto_seq, last_seq = chunk[-1].seq, thread.messages[-1].seq
        model_ref = self.model_ref(ctx)
        key = thread.conversation_key
        try:
            call = await ctx.call_model(
                trigger="summary",
                model_ref=model_ref,
                system=REFRESH_INSTRUCTIONS,
                messages=[Message.user(render_for_summary(state.data.get("summary"), chunk))],
                conversation_key=key,
                thread_id=thread.id,
                purpose="summary",
            )
        except (ProviderError, OperatorError) as e:
            # call_model recorded the failed run; the old summary and cursor stay
            state.transient[FAILED_AT] = last_seq
            await ctx.audit(
                "summary",
                "failed",
                conversation_key=key,
                data={"layer": self.layer, "model": model_ref, "error": str(e)},
            )
            log.warning("agent %s: summary refresh of %s failed: %s", ctx.agent, key, e)
            return False
        summary = call.completion.message.text.strip()
        run = call.run
        if not summary:
            run.status, run.error = "error", "the model returned an empty summary"
            failure = {"layer": self.layer, "model": model_ref, "error": run.error}
            await commit_memory_run(
                ctx, runs=[run], audits=[AuditRecord("summary", "failed", key, run.id, failure)]
            )
            state.transient[FAILED_AT] = last_seq
            return False
        data = {
            "layer": self.layer,
            "upto_seq": upto_seq,
            "messages": len(chunk),
            "summary_chars": len(summary),
        }
        audit = AuditRecord("summary", "ok", key, run.id, data)
        moved = LayerState({"summary": summary}, upto_seq)
        await commit_memory_run(ctx, cursor=(thread, self.layer, moved), runs=[run], audits=[audit])
        return True

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        state = await layer_state(ctx, thread, self.layer)
        shown = thread.messages[after_cursor(thread.messages, state.upto_seq) :]
        return {
            "kind": self.kind,
            "layer": self.layer,
            "summary": state.data.get("summary"),
            "upto_seq": state.upto_seq,
            "every": self.every,
            "model": self.model_ref(ctx),
            "messages": [
                MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True) for m in shown
            ],
            "refresh_due": self.settle_due(thread),
        }
