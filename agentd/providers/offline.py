"""The built-in `offline` model: no network, deterministic, and honest about what it was given.

It tells the person how many earlier messages of the conversation it sees,
whether a summary or recalled exchanges came with them and which memory keys
it holds (read from the request's hints, never from the prompt's wording),
really calls the memory tools when asked ("remember KEY: VALUE", "recall KEY",
"forget KEY", "what do you remember") and any offered tool on request ("call
TOOL {json arguments}"), repeats a recalled value (the
material of its remembered block), summarises for compaction with an
extractive rule, and reports no usage, so the runtime estimates tokens and
marks them as estimated. Streamed, its reply comes word by word
(deterministic, no waiting). A request's `stop` sequences and output limit
are honoured as a real model would: the answer ends before the first stop
sequence, and after about `max_output_tokens` tokens (four characters each).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from agentd.messages import CHARS_PER_TOKEN, Message, TextPart, ToolCallPart
from agentd.providers.base import Completion, CompletionRequest, TextDelta
from agentd.providers.remembered import material_of

_REMEMBER = re.compile(r"^\s*remember\s+(\S+?)\s*[:=]\s*(.+?)\s*$", re.I | re.S)
_RECALL = re.compile(r"^\s*recall\s+(\S+?)\s*[?.!]?\s*$", re.I)
_FORGET = re.compile(r"^\s*forget\s+(\S+?)\s*[.!]?\s*$", re.I)
_LIST = re.compile(r"^\s*what do you remember\s*\??\s*$", re.I)
_CALL = re.compile(r"^\s*call\s+([A-Za-z0-9_-]{1,64})\s*(\{.*\})?\s*$", re.I | re.S)
SUMMARY_LINE_CHARS = 160
SUMMARY_MAX_CHARS = 4000


class OfflineProvider:
    name = "offline"

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.purpose == "summary":
            return Completion(Message.assistant(_extractive_summary(request)), stop_reason="stop")
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            return _answer(request, _after_tools(last))
        text = last.text if last is not None else ""
        call = _memory_call(text, {t.name for t in request.tools})
        if call is not None:
            name, args = call
            part = ToolCallPart(id=f"call_{len(request.messages)}", name=name, arguments=args)
            return Completion(Message(role="assistant", parts=(part,)), stop_reason="tool_calls")
        return _answer(request, _describe(request, text))

    async def stream(self, request: CompletionRequest) -> AsyncGenerator[TextDelta | Completion, None]:
        completion = await self.complete(request)
        for word in re.findall(r"\S*\s*", completion.message.text):
            if word:
                yield TextDelta(word)
        yield completion


def _answer(request: CompletionRequest, text: str) -> Completion:
    """The answer cut where the request says: before a stop sequence, or at its output limit."""
    stops = [i for s in request.stop if (i := text.find(s)) >= 0]
    if stops:
        return Completion(Message.assistant(text[: min(stops)]), stop_reason="stop")
    limit = request.max_output_tokens
    if limit is not None and len(text) > limit * CHARS_PER_TOKEN:
        return Completion(Message.assistant(text[: limit * CHARS_PER_TOKEN]), stop_reason="length")
    return Completion(Message.assistant(text), stop_reason="stop")


def _memory_call(text: str, tools: set[str]) -> tuple[str, dict[str, Any]] | None:
    if (m := _CALL.match(text)) and m.group(1) in tools:
        try:
            args = json.loads(m.group(2) or "{}")
        except json.JSONDecodeError:
            return None
        return (m.group(1), args) if isinstance(args, dict) else None
    if (m := _REMEMBER.match(text)) and "remember" in tools:
        return "remember", {"key": m.group(1), "value": m.group(2)}
    if (m := _RECALL.match(text)) and "recall" in tools:
        return "recall", {"key": m.group(1)}
    if (m := _FORGET.match(text)) and "forget" in tools:
        return "forget", {"key": m.group(1)}
    if _LIST.match(text) and "list_memories" in tools:
        return "list_memories", {}
    return None


def _after_tools(tool_message: Message) -> str:
    lines = []
    for result in tool_message.tool_results:
        if result.is_error:
            lines.append(f"{result.name} failed: {result.content}")
        elif result.name == "recall":
            lines.append(f"I remember: {material_of(result.content)}")
        else:
            lines.append(result.content)
    return "\n".join(lines)


def _describe(request: CompletionRequest, text: str) -> str:
    earlier = _SAID.count(request.messages, len(request.messages) - 1)
    sees = f"I see {earlier} earlier message{'s' if earlier != 1 else ''} in this conversation"
    hints = request.hints
    if hints.summary:
        sees += " and a summary of older turns"
    if hints.recalled:
        sees += " and some recalled earlier exchanges"
    keys = hints.memory_keys
    if keys is None:
        memory = "I have no persistent memory."
    elif keys:
        memory = f"Memory keys I hold: {', '.join(keys)}."
    else:
        memory = "I hold no memory keys yet."
    return f"(offline model) {sees}. {memory} You said: {text}"


def _extractive_summary(request: CompletionRequest) -> str:
    """Keep the summary so far, then the first sentence of each later message, newest kept if too long."""
    source = request.messages[-1].text if request.messages else ""
    kept: list[str] = []
    for line in source.splitlines():
        line = line.strip()
        if not line or line in ("Summary so far:", "Later messages:"):
            continue
        first = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
        kept.append(first if len(first) <= SUMMARY_LINE_CHARS else first[: SUMMARY_LINE_CHARS - 1] + "…")
    summary_lines: list[str] = []
    total = 0
    for line in reversed(kept):
        if total + len(line) + 1 > SUMMARY_MAX_CHARS:
            break
        summary_lines.append(line)
        total += len(line) + 1
    return "\n".join(reversed(summary_lines)) or "(nothing to summarise)"


def _said(message: Message) -> bool:
    """A message a person would count: theirs or a reply with text; a tool call's steps (the call, its
    result) are not."""
    return message.role != "tool" and any(type(p) is TextPart and p.text for p in message.parts)


class _SaidCounter:
    """How many messages of a history were said, read once per message: a conversation's request
    repeats its history every turn (the same Message objects, from the hot thread), so only what came
    after the last count is read, and a 10,000-message conversation costs what a short one does."""

    KEPT = 256  # conversations remembered; the oldest is forgotten first

    def __init__(self) -> None:
        # first message's id -> (the first message, the last one counted, its index, the count so far);
        # the first message is held, so its id cannot be reused while it is here
        self._seen: dict[int, tuple[Message, Message, int, int]] = {}

    def count(self, messages: Sequence[Message], upto: int) -> int:
        """How many of messages[:upto] were said. Read by index, never sliced: a prompt's messages are
        a MessageSequence over the hot thread, whose slice would copy the whole history."""
        if upto <= 0:
            return 0
        start = total = 0
        head = messages[0]
        seen = self._seen.pop(id(head), None)
        if seen is not None:
            first, last, at, counted = seen
            if first is head and at < upto and messages[at] is last:
                start, total = at + 1, counted
        total += sum(1 for i in range(start, upto) if _said(messages[i]))
        self._seen[id(head)] = (head, messages[upto - 1], upto - 1, total)
        while len(self._seen) > self.KEPT:
            del self._seen[next(iter(self._seen))]
        return total


_SAID = _SaidCounter()
