"""A turn's prompt kept inside the model's context window: compaction before, and after a refusal.

Before each chat call the prompt is estimated (characters per token, agentd.messages); one that
would exceed the window (agentd.providers.windows) is compacted first, not sent to be refused. A
provider's overflow error (the estimate was short, or the window was unknown: the error teaches
it, remembered for the process) is recovered the same way, and the call retried. Each recovery is
an audit event of the run (`model/overflow`: trigger, estimate, window, what the compaction did),
and their number is bounded: a compaction that changed nothing is not tried again.

A memory that does not compact (a window of the last messages, a rolling summary, Σ...) or whose
compaction failed is recovered by leaving its oldest turns out of this request (`left_out`): the
request starts at a later message of the person's, so it fits; nothing stored is dropped, and the
memory goes on as before at the next turn. That too is audited (`model/overflow`, `recovery:
left_out` with the number of messages left out) and counted in the same bound.

The new messages of the turn are never compacted (they are not in the thread yet): when they alone
exceed the window, no compaction can help, and the person is told so plainly (`MessageTooLarge`).
The message is still stored with the run; the next turn compacts it away (in pieces that fit the
summariser), so the conversation goes on without /reset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from agentd.engine.conversation import Conversation
from agentd.errors import ProviderError
from agentd.memory.base import Compacts
from agentd.messages import Message, MessageSequence, estimate_tokens
from agentd.providers.base import CompletionRequest
from agentd.providers.images import image_tokens
from agentd.providers.windows import learn, window_of
from agentd.store.records import AuditRecord, RunRecord

MAX_RECOVERIES = 2  # per turn: one compaction keeping the last turns, then one of everything before this turn


class MessageTooLarge(Exception):
    """The turn's own messages are longer than the model's window: nothing to compact away."""


def request_tokens(request: CompletionRequest) -> int:
    """The estimated prompt of `request`: system, messages and the tools' schemas, and a fixed count per
    image it shows (agentd.providers.images.image_tokens; a model that sees none reads the stand-ins,
    which the messages' characters count)."""
    tools = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)
    chars = len(request.system) + sum(m.char_count() for m in request.messages) + tools
    shown = _images_shown(request) if request.media else set()
    return estimate_tokens(chars) + sum(image_tokens(sha, request.media[sha]) for sha in shown)


def _images_shown(request: CompletionRequest) -> set[str]:
    """The images (not audio) the request holds the bytes of and one of its messages shows."""
    parts = (p for m in request.messages for p in (*m.media, *(f for r in m.tool_results for f in r.media)))
    return {p.sha256 for p in parts if p.media == "image" and p.sha256 in request.media}


class OverflowGuard:
    def __init__(self, conv: Conversation, run: RunRecord, audit: list[AuditRecord]):
        self._conv, self._run, self._audit = conv, run, audit
        self.recoveries = 0

    def window(self) -> int | None:
        model = self._conv.spec.model
        ref = self._run.model or model.name
        return window_of(ref, model.context_window if ref == model.name else None)

    def over(self, request: CompletionRequest) -> bool:
        window = self.window()
        return window is not None and request_tokens(request) + (request.max_output_tokens or 0) > window

    def learn(self, error: ProviderError) -> None:
        if error.provider and error.model:
            learn(f"{error.provider}/{error.model}", str(error))

    def check_new(self, system: str, new: Sequence[Message]) -> None:
        """Raise MessageTooLarge when the turn's own messages (and the system prompt) exceed the window."""
        window = self.window()
        tokens = estimate_tokens(len(system) + sum(m.char_count() for m in new))
        if window is not None and tokens > window:
            kept = "It is saved, but" if self._conv.memory.keeps_transcript else "Nothing was kept, and"
            raise MessageTooLarge(
                f"Your message is too long for this model: it comes to about {tokens} tokens with my "
                f"instructions, and the model can read at most {window} tokens at once. {kept} I could "
                "not answer it; please send it in smaller parts (or a summary of it)."
            )

    async def recover(self, trigger: str, request: CompletionRequest, error: str | None = None) -> bool:
        """Compact the thread for a request that is (`overflow`) or would be (`window`) too long;
        True when the thread changed, so a rebuilt prompt is shorter and worth sending."""
        compaction = self._conv.memory.compaction
        if self.recoveries >= MAX_RECOVERIES or not isinstance(compaction, Compacts):
            return False
        self.recoveries += 1
        # first keep the last two turns verbatim; the second time keep none (this turn is apart)
        keep = 2 if self.recoveries == 1 else 0
        outcome = await compaction.compact(self._conv.ctx, self._conv.thread, trigger, keep_turns=keep)
        if outcome.status == "nothing_to_compact" and keep:
            return await self.recover(trigger, request, error)
        data = {
            "trigger": trigger,
            "model": self._run.model or self._conv.spec.model.name,
            "recovery": "compaction",
            "estimated_tokens": request_tokens(request),
            "window": self.window(),
            "attempt": self.recoveries,
            "compaction": outcome.status,
            "compaction_run": outcome.run_id,
            "compacted_messages": outcome.compacted_messages,
        }
        if error is not None:
            data["error"] = error
        self._audit.append(AuditRecord("model", "overflow", self._run.conversation_key, self._run.id, data))
        return outcome.status == "ok"

    def left_out(
        self, trigger: str, request: CompletionRequest, history: MessageSequence, error: str | None = None
    ) -> MessageSequence | None:
        """The history without its oldest turns, so that `request` fits the window (for this request
        only: nothing stored changes); None when the bound is reached or no history is left to leave
        out. With no window known (the error named none), half of the history's tokens go."""
        if self.recoveries >= MAX_RECOVERIES or not len(history):
            return None
        self.recoveries += 1
        window = self.window()
        tokens = request_tokens(request)
        fixed = request_tokens(replace(request, messages=request.messages[len(history) :]))
        room = (window - (request.max_output_tokens or 0) if window else (tokens + fixed) // 2) - fixed
        start, used = len(history), 0
        for i in range(len(history) - 1, -1, -1):  # from the newest back, while it fits
            used += estimate_tokens(history[i].char_count())
            if used > room:
                break
            if history[i].role == "user":  # a turn starts at a person's message (tool results follow calls)
                start = i
        if start == 0:  # all of it fits by the estimate, yet the model refused: its first turn goes
            start = next((i for i in range(1, len(history)) if history[i].role == "user"), len(history))
        data = {
            "trigger": trigger,
            "model": self._run.model or self._conv.spec.model.name,
            "recovery": "left_out",
            "estimated_tokens": tokens,
            "window": window,
            "attempt": self.recoveries,
            "left_out_messages": start,
        }
        if error is not None:
            data["error"] = error
        self._audit.append(AuditRecord("model", "overflow", self._run.conversation_key, self._run.id, data))
        return MessageSequence(history[start:])
