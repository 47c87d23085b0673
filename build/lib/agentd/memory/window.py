"""window — the last `messages: N` messages of the thread; the purpose is in the system prompt anyway.

Where the cut falls matters more than N. A window that begins with tool
results whose call was cut off is refused by providers (the result answers
nothing), and one that begins with the assistant's half of an exchange replays
an answer without its question (and Anthropic refuses a first message that is
not the person's). So the cut only ever moves forward, and the window holds at
most N messages:

1. past tool results at the start (their call is outside): a tool call and
   its results are both in or both out;
2. then, when the window holds a person's message, up to the first one, so
   the replay starts where a person spoke. When it holds none (a single run
   with more tool steps than N), it starts at the first message after step 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.config.models import MemorySpec
from agentd.config.strategies import WindowStrategy
from agentd.memory.base import MemoryContext, MemoryView, TurnInput
from agentd.messages import MESSAGE_ADAPTER
from agentd.store.queries import MessageCounts
from agentd.store.records import StoredMessage, StoredThread


def window_start(messages: Sequence[StoredMessage], size: int) -> int:
    """Index of the first message of the window of at most `size` messages (len(messages) when empty)."""
    start = max(0, len(messages) - size)
    while start < len(messages) and messages[start].message.role == "tool":
        start += 1
    for i in range(start, len(messages)):
        if messages[i].message.role == "user":
            return i
    return start


class WindowMemory:
    """The last N messages; nothing to do after a run, nothing persisted besides the transcript."""

    kind = "window"
    keeps_transcript = True

    def __init__(self, spec: WindowStrategy, memory: MemorySpec | None = None, layer: str = "window"):
        self.size = spec.messages
        self.layer = layer

    async def tail_from(self, ctx: MemoryContext, thread: StoredThread) -> int:
        # the cut only ever moves forward from the last N (window_start), so N messages are enough
        return thread.next_seq - self.size

    def window(self, thread: StoredThread) -> list[StoredMessage]:
        messages = thread.messages
        return messages[window_start(messages, self.size) :]

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        shown = [m.message for m in self.window(thread)]
        return MemoryView(messages=shown, chars=sum(m.char_count() for m in shown))

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        shown = self.window(thread)
        stored = 0  # the hot thread holds only the window: count the rest in the store
        if thread.id is not None:
            counts = await ctx.store.read(MessageCounts(thread.conversation_key))
            stored = counts["messages"] - counts["compacted"]
        return {
            "kind": self.kind,
            "layer": self.layer,
            "window": self.size,
            "messages": [
                MESSAGE_ADAPTER.dump_python(m.message, mode="json", exclude_none=True) for m in shown
            ],
            "first_seq": shown[0].seq if shown else None,
            "out_of_view": max(0, stored - len(shown)),
        }
