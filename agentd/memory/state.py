"""state — a structured Σ with a fixed set of fields instead of the transcript (product.md §5).

Each turn the model sees the spec, Σ as JSON and the last exchange verbatim,
never the transcript; when a fold is pending (the fold model could not be
reached), the messages not yet folded (the queue) are shown verbatim too.

Once per run (settle: one extra call however many tool steps the run took) a
model folds the messages after the layer's cursor into a patch of only the
changed keys (see patches.py). What happens when it goes wrong:

- refused (not JSON, not an object, a key outside `fields`, Σ over max_chars,
  or the provider rejected the request itself, HTTP 400/413/422): retried
  once with the reason; refused again, Σ is kept and the pending messages are
  dropped (the cursor moves past them). Every refusal is an audit event
  {kind: fold, action: refused, data: {reason, attempt}}; the drop is one too.
- the call failed otherwise (unreachable, 5xx or 429 after the provider's
  retries, a refused key, an unknown model): the queue is kept, the cursor
  does not move, and the next settle (before the next turn) folds it all.
- no model at all (none configured, or only the offline model): no fold; the
  view is a window of the last `tail_messages` messages, and the run log says so.

Σ, the cursor, the fold run rows and the audit rows of one settle are committed
in one transaction. The messages stay in the thread (the audit trail and other
layers of a composite read them); the model just never sees them again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentd.config.models import MemorySpec
from agentd.config.strategies import StateStrategy
from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import MemoryContext, MemoryView, TurnInput
from agentd.memory.cursor import after_cursor, back_to_call, cursor_behind, layer_state
from agentd.memory.erasure import Erasure
from agentd.memory.patches import (
    TOOL_RESULT_CHARS,
    AnswerRefused,
    FoldResult,
    fold_answer,
    rejected_request,
    sigma_json,
)
from agentd.memory.runs import commit_memory_run, structured_model
from agentd.messages import MESSAGE_ADAPTER, Message, render_transcript
from agentd.providers.remembered import remembered_block
from agentd.store.records import AuditRecord, LayerState, RunRecord, StoredMessage, StoredThread

log = logging.getLogger(__name__)

AUDIT_KIND = "fold"

FOLD_INSTRUCTIONS = """\
You maintain Σ, the state of a conversation, for an assistant that will not see the transcript: \
each turn it sees only Σ and the last exchange.
What Σ keeps: {spec}
Fields (the only keys Σ may have):
{fields}
You get Σ as it is now and the messages since it was last updated. Answer with one JSON object, \
a patch holding only the keys whose value changes:
- a key with a new value (text, a number, a list or an object) sets it;
- a key set to null deletes it, when it no longer holds;
- a key that does not change is left out; answer {{}} when nothing changes.
Never send the whole state back, never use a key outside the list above, and keep Σ as JSON \
under {max_chars} characters. Answer with the JSON object only, no explanation."""

RETRY = (
    "That patch was refused: {reason}\n"
    "Send a corrected patch: one JSON object holding only the keys that change, from the allowed fields."
)

NO_MODEL_NOTE = (
    "state memory has no model to fold with (set memory.strategy.model, or memory_extractor_model in "
    "agentd.yaml): showing the last {n} messages instead of a folded state"
)


def last_exchange_start(messages: Sequence[StoredMessage]) -> int:
    """Index of the last person's message: the last exchange runs from there to the end."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].message.role == "user":
            return i
    return 0


def keep_tool_pairs(messages: Sequence[StoredMessage], start: int) -> int:
    """Move a cut back so a tool result is never shown without the call it answers."""
    while 0 < start < len(messages) and messages[start].message.role == "tool":
        start -= 1
    return start


def tail_start(messages: Sequence[StoredMessage], n: int) -> int:
    """Where a window of the last `n` messages starts (a little earlier to keep a tool call whole)."""
    return keep_tool_pairs(messages, max(0, len(messages) - n))


def dump(stored: Sequence[StoredMessage]) -> list[dict[str, Any]]:
    return [
        {"seq": m.seq, **MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True)}
        for m in stored
    ]


class StateMemory:
    """Σ folded once per run from the messages after its cursor; see the module docstring."""

    kind = "state"
    keeps_transcript = True
    # Σ is made of the thread's messages: an erasure there deletes it and the fold starts over
    LAYER_KEYS: ClassVar[Mapping[str, Erasure]] = {"sigma": Erasure.REBUILD}

    def __init__(self, spec: StateStrategy, memory: MemorySpec | None = None, layer: str = "state"):
        self.spec = spec
        self.layer = layer
        self.fields = [f.name for f in spec.fields]
        self.instructions = FOLD_INSTRUCTIONS.format(
            spec=spec.spec.strip(),
            fields="\n".join(f"- {f.name}: {f.description}" for f in spec.fields),
            max_chars=spec.max_chars,
        )

    def sigma(self, state: LayerState) -> dict[str, Any]:
        stored = state.data.get("sigma") or {}
        # a field removed from the definition is no longer shown (the next fold drops it)
        return {k: stored[k] for k in self.fields if k in stored}

    # -- what the model sees -----------------------------------------------------------

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        state = await layer_state(ctx, thread, self.layer)
        sigma = self.sigma(state)
        messages = thread.messages
        if structured_model(ctx, self.spec.model) is None:
            start = tail_start(messages, self.spec.tail_messages)
            sections = [self.section(sigma, unfolded=0, degraded=True)] if sigma else []
            return MemoryView(
                system_sections=sections,
                messages=[m.message for m in messages[start:]],
                notes=(NO_MODEL_NOTE.format(n=self.spec.tail_messages),),
            )
        start, unfolded = self.shown_from(messages, state.upto_seq)
        notes = (
            (f"state memory: {unfolded} message(s) not yet folded into Σ are shown verbatim",)
            if unfolded
            else ()
        )
        return MemoryView(
            system_sections=[self.section(sigma, unfolded=unfolded)],
            messages=[m.message for m in messages[start:]],
            notes=notes,
        )

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        """What the view reads (see shown_from and tail_start), as a seq: Σ holds the rest."""
        messages = thread.messages
        if structured_model(ctx, self.spec.model) is None:
            return back_to_call(messages, thread.next_seq - self.spec.tail_messages)
        state = await layer_state(ctx, thread, self.layer)
        last_exchange = next((m.seq for m in reversed(messages) if m.message.role == "user"), None)
        if last_exchange is None:  # not among the messages held: older than them (or there is none)
            last_exchange = (messages[0].seq if messages else thread.next_seq) - 1
        return back_to_call(messages, min(state.upto_seq + 1, last_exchange))

    def shown_from(self, messages: Sequence[StoredMessage], upto_seq: int) -> tuple[int, int]:
        """Where the verbatim messages start (the last exchange, or the queue if it is longer),
        and how many messages are not folded yet."""
        pending = after_cursor(messages, upto_seq)
        start = keep_tool_pairs(messages, min(last_exchange_start(messages), pending))
        return start, len(messages) - pending

    def section(self, sigma: dict[str, Any], *, unfolded: int, degraded: bool = False) -> str:
        fields = "; ".join(f"{f.name} ({f.description})" for f in self.spec.fields)
        if degraded:
            head = (
                "Conversation state (Σ) as last kept; it is not being updated now (no model to fold "
                "with), so the recent messages follow instead."
            )
        else:
            head = (
                "Conversation state (Σ). You do not see the earlier transcript: this state is what was "
                "kept of it, updated after each of your replies. The messages that follow are the last "
                "exchange"
                + (
                    f", with {unfolded} message(s) not folded into Σ yet included verbatim."
                    if unfolded
                    else "."
                )
            )
        what = f"{head}\nIt keeps: {self.spec.spec.strip()}\nFields: {fields}"
        if not sigma:
            return f"{what}\nΣ = {{}} (nothing kept yet)"
        return remembered_block("state", f"{what}\nΣ, as JSON:", sigma_json(sigma))

    def pending_in_view(self, thread: StoredThread) -> int:
        state = thread.layers.get(self.layer)
        return 0 if state is None else len(thread.messages) - after_cursor(thread.messages, state.upto_seq)

    # -- the fold ----------------------------------------------------------------------

    def settle_due(self, thread: StoredThread) -> bool:
        return cursor_behind(thread, self.layer)

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        if thread.id is None:
            return
        state = await layer_state(ctx, thread, self.layer)
        pending = thread.messages[after_cursor(thread.messages, state.upto_seq) :]
        model = structured_model(ctx, self.spec.model)
        if not pending or model is None:
            return
        await self.fold(ctx, thread, state, pending, model, run_id)

    async def fold(
        self,
        ctx: MemoryContext,
        thread: StoredThread,
        state: LayerState,
        pending: list[StoredMessage],
        model: str,
        parent_run_id: str | None,
    ) -> None:
        key, thread_id = thread.conversation_key, thread.id
        assert thread_id is not None
        sigma = self.sigma(state)
        upto_seq = pending[-1].seq
        prompt = [Message.user(self.fold_prompt(sigma, pending))]
        messages = prompt
        runs: list[RunRecord] = []
        audits: list[AuditRecord] = []
        for attempt in (1, 2):
            try:
                call = await ctx.call_model(
                    trigger="fold",
                    model_ref=model,
                    system=self.instructions,
                    messages=messages,
                    conversation_key=key,
                    thread_id=thread_id,
                    parent_run_id=parent_run_id,
                    purpose="fold",
                )
            except (ProviderError, OperatorError) as e:
                if not rejected_request(e):
                    # Unreachable or failing for now: keep the queue; the next settle folds it.
                    audits.append(
                        AuditRecord(
                            AUDIT_KIND,
                            "deferred",
                            key,
                            None,
                            {"error": str(e), "attempt": attempt, "pending": len(pending)},
                        )
                    )
                    await commit_memory_run(ctx, runs=runs, audits=audits)
                    log.warning("agent %s: fold of %s deferred: %s", ctx.agent, key, e)
                    return
                reason, answer, attempt_run = f"the provider rejected the fold request: {e}", None, None
            else:
                answer, attempt_run = call.completion.message.text, call.run
                runs.append(attempt_run)
                try:
                    result = fold_answer(answer, sigma, self.fields, self.spec.max_chars)
                except AnswerRefused as refused:
                    reason = refused.reason
                    attempt_run.status, attempt_run.error = "error", f"patch refused: {reason}"
                else:
                    audits.append(self.applied(key, attempt_run.id, attempt, pending, result))
                    new_state = LayerState({**state.data, "sigma": result.sigma}, upto_seq)
                    await commit_memory_run(
                        ctx, cursor=(thread, self.layer, new_state), runs=runs, audits=audits
                    )
                    return
            audits.append(
                AuditRecord(
                    AUDIT_KIND,
                    "refused",
                    key,
                    attempt_run.id if attempt_run else None,
                    {"reason": reason, "attempt": attempt},
                )
            )
            log.info("agent %s: fold patch of %s refused (attempt %d): %s", ctx.agent, key, attempt, reason)
            if answer is None:  # the request itself was rejected: nothing to correct, send it again
                messages = prompt
            else:
                retry = Message.user(RETRY.format(reason=reason))
                messages = [*prompt, Message.assistant(answer or "(an empty answer)"), retry]
        # Refused twice: keeping an impossible fold would retry it forever, growing each time.
        audits.append(
            AuditRecord(
                AUDIT_KIND,
                "dropped",
                key,
                None,
                {
                    "reason": "the patch was refused twice; Σ is kept and these messages are not folded",
                    "messages": len(pending),
                    "from_seq": pending[0].seq,
                    "upto_seq": upto_seq,
                },
            )
        )
        new_state = LayerState(dict(state.data), upto_seq)
        await commit_memory_run(ctx, cursor=(thread, self.layer, new_state), runs=runs, audits=audits)
        log.warning("agent %s: fold of %s refused twice; %d messages dropped", ctx.agent, key, len(pending))

    def fold_prompt(self, sigma: dict[str, Any], pending: Sequence[StoredMessage]) -> str:
        now = sigma_json(sigma) if sigma else "{}"
        exchange = render_transcript((m.message for m in pending), TOOL_RESULT_CHARS)
        return f"Σ now:\n{now}\n\nMessages since Σ was last updated:\n{exchange}"

    @staticmethod
    def applied(
        key: str, run_id: str, attempt: int, pending: Sequence[StoredMessage], result: FoldResult
    ) -> AuditRecord:
        return AuditRecord(
            AUDIT_KIND,
            "ok",
            key,
            run_id,
            {
                "attempt": attempt,
                "messages": len(pending),
                "upto_seq": pending[-1].seq,
                "changed": list(result.changed),
                "deleted": list(result.deleted),
                "chars": len(sigma_json(result.sigma)),
            },
        )

    # -- the inspector -----------------------------------------------------------------

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        state = await layer_state(ctx, thread, self.layer)
        sigma = self.sigma(state)
        model = structured_model(ctx, self.spec.model)
        messages = thread.messages
        pending = after_cursor(messages, state.upto_seq)
        if model is None:
            start = tail_start(messages, self.spec.tail_messages)
        else:
            start, _ = self.shown_from(messages, state.upto_seq)
        return {
            "kind": self.kind,
            "layer": self.layer,
            "model": model,
            "degraded": model is None,
            "sigma": sigma,
            "sigma_chars": len(sigma_json(sigma)),
            "max_chars": self.spec.max_chars,
            "fields": [{"name": f.name, "description": f.description} for f in self.spec.fields],
            "upto_seq": state.upto_seq,
            "not_folded": dump(messages[pending:]),
            "messages": dump(messages[start:]),
        }
