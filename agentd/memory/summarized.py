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
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentd.config.models import MemorySpec
from agentd.config.strategies import SummarizedStrategy
from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import MemoryContext, MemoryView, StrategyDefaults, TurnInput
from agentd.memory.compaction import render_for_summary, verbatim_tail_start
from agentd.messages import MESSAGE_ADAPTER, Message
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.memory_state import LayerState, get_layer_state, put_layer_state
from agentd.store.runs import insert_run
from agentd.store.transcripts import StoredMessage, StoredThread

log = logging.getLogger(__name__)

# begins like compaction's heading, which the offline model recognises
SUMMARY_HEADING = (
    "Summary of the earlier part of this conversation (a rolling summary; the messages since follow):"
)
REFRESH_INSTRUCTIONS = (
    "You keep a running summary of a conversation so it can continue without its older messages. "
    "Rewrite the summary so far to take in the later messages below: keep decisions made, facts "
    "established, the person's preferences and requests, open questions and errors met; drop what "
    "no longer matters. Write plain text, no preamble."
)


@dataclass(slots=True)
class SummaryState:
    """This layer's view of one thread, cached in thread.layers[layer]."""

    summary: str | None = None
    upto_seq: int = 0
    # the last message seq when a refresh failed: retry only once newer messages arrive
    failed_at_seq: int | None = None


def since(messages: Sequence[StoredMessage], upto_seq: int) -> list[StoredMessage]:
    """The messages after the cursor (a suffix: messages are in seq order)."""
    i = len(messages)
    while i > 0 and messages[i - 1].seq > upto_seq:
        i -= 1
    return list(messages[i:])


def foldable(messages: Sequence[StoredMessage], upto_seq: int) -> list[StoredMessage]:
    """The messages after the cursor and before the latest turn: what a refresh folds in."""
    pending = since(messages, upto_seq)
    return pending[: verbatim_tail_start(pending, keep_turns=1)]


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


class SummarizedMemory(StrategyDefaults):
    kind = "summarized"
    keeps_transcript = True

    def __init__(self, spec: SummarizedStrategy, memory: MemorySpec | None = None, layer: str = "summarized"):
        self.every = spec.every
        self.model = spec.model
        self.layer = layer

    # -- state ------------------------------------------------------------------------

    def _cached(self, thread: StoredThread) -> SummaryState | None:
        state = thread.layers.get(self.layer)
        return state if isinstance(state, SummaryState) else None

    async def state(self, ctx: MemoryContext, thread: StoredThread) -> SummaryState:
        cached = self._cached(thread)
        if cached is not None:
            return cached
        state = SummaryState()
        thread_id = thread.id
        if thread_id is not None:
            stored = await ctx.store.read(lambda conn: get_layer_state(conn, thread_id, self.layer))
            state = SummaryState(stored.data.get("summary"), stored.upto_seq)
        thread.layers[self.layer] = state
        return state

    def model_ref(self, ctx: MemoryContext) -> str:
        return ctx.memory_model(self.model) or ctx.agent_model(small=True)

    # -- the seam ---------------------------------------------------------------------

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        state = await self.state(ctx, thread)
        sections = []
        if state.summary:
            sections.append(f"{SUMMARY_HEADING}\n{state.summary}")
        if thread.summary:  # a hand-made /compact of the same thread
            sections.append(f"Summary of older turns (compacted):\n{thread.summary}")
        shown = [m.message for m in since(thread.messages, state.upto_seq)]
        chars = sum(len(s) for s in sections) + sum(m.char_count() for m in shown)
        return MemoryView(system_sections=sections, messages=shown, chars=chars)

    def settle_due(self, thread: StoredThread) -> bool:
        state = self._cached(thread)
        if state is None:
            # not loaded yet (a restart): settle() loads the cursor and decides
            return len(thread.messages) >= self.every
        if count_foldable(thread.messages, state.upto_seq, self.every) < self.every:
            return False
        last_seq = thread.messages[-1].seq
        return state.failed_at_seq is None or last_seq > state.failed_at_seq

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        await self.state(ctx, thread)
        if self.settle_due(thread):
            await self.refresh(ctx, thread)

    async def refresh(self, ctx: MemoryContext, thread: StoredThread) -> bool:
        """Fold the pending messages into the summary; True when the summary moved."""
        state = await self.state(ctx, thread)
        thread_id = thread.id
        chunk = foldable(thread.messages, state.upto_seq)
        if thread_id is None or not chunk:
            return False
        upto_seq = chunk[-1].seq
        last_seq = thread.messages[-1].seq
        model_ref = self.model_ref(ctx)
        key = thread.conversation_key
        try:
            call = await ctx.call_model(
                trigger="summary",
                model_ref=model_ref,
                system=REFRESH_INSTRUCTIONS,
                messages=[Message.user(render_for_summary(state.summary, chunk))],
                conversation_key=key,
                thread_id=thread_id,
                purpose="summary",
            )
        except (ProviderError, OperatorError) as e:
            # call_model recorded the failed run; the old summary and cursor stay
            state.failed_at_seq = last_seq
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
        now = time.time()
        if not summary:
            run.status, run.error = "error", "the model returned an empty summary"
            failure = AuditRecord(
                "summary",
                "failed",
                key,
                run.id,
                {"layer": self.layer, "model": model_ref, "error": run.error},
            )

            def record_failure(conn):  # type: ignore[no-untyped-def]
                insert_run(conn, run)
                insert_audit(conn, ctx.agent, [failure], now)

            await ctx.store.write(record_failure)
            state.failed_at_seq = last_seq
            return False

        audit = AuditRecord(
            "summary",
            "ok",
            key,
            run.id,
            {
                "layer": self.layer,
                "upto_seq": upto_seq,
                "messages": len(chunk),
                "summary_chars": len(summary),
            },
        )
        stored = LayerState({"summary": summary}, upto_seq)

        def commit(conn):  # type: ignore[no-untyped-def]
            put_layer_state(conn, thread_id, self.layer, stored, now)
            insert_run(conn, run)
            insert_audit(conn, ctx.agent, [audit], now)

        await ctx.store.write(commit)
        # only now, committed, does the cached view move
        state.summary, state.upto_seq, state.failed_at_seq = summary, upto_seq, None
        return True

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        state = await self.state(ctx, thread)
        shown = since(thread.messages, state.upto_seq)
        return {
            "kind": self.kind,
            "layer": self.layer,
            "summary": state.summary,
            "upto_seq": state.upto_seq,
            "every": self.every,
            "model": self.model_ref(ctx),
            "messages": [
                MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True) for m in shown
            ],
            "refresh_due": self.settle_due(thread),
        }
