"""A memory layer's cursor: the last message seq it has taken in, cached on the hot thread.

Every layer that works through the transcript after a run (summaries, folds,
extraction, episodes) keeps its progress as a cursor in its LayerState; these
are the only functions that read one.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from agentd.memory.base import MemoryContext
from agentd.store.queries import LayerStateOf
from agentd.store.records import LayerState, StoredMessage, StoredThread


def after_cursor(messages: Sequence[StoredMessage], upto_seq: int) -> int:
    """Index of the first message after the cursor (len(messages) when it has taken in all).

    Messages are in seq order, so walking back from the end stops at the cursor:
    cheap however long the thread.
    """
    i = len(messages)
    while i > 0 and messages[i - 1].seq > upto_seq:
        i -= 1
    return i


def back_to_call(messages: Sequence[StoredMessage], seq: int) -> int:
    """`seq`, moved back while the message there is a tool result, so what is read from it never
    starts with a result whose call is cut off (a memory's `tail_from`). When the call is older than
    the messages held, a seq before them: the loader then loads older ones."""
    if not messages or seq < messages[0].seq:
        return seq
    i = bisect.bisect_left(messages, seq, key=lambda m: m.seq)
    if i == len(messages):
        return seq
    while messages[i].message.role == "tool":
        if i == 0:
            return messages[0].seq - 1
        i -= 1
    return messages[i].seq


def cursor_behind(thread: StoredThread, layer: str) -> bool:
    """Whether the thread has messages past the layer's cursor (cheap: settle_due's check).

    A layer whose state is not loaded yet (a restart, an evicted thread) counts as behind:
    settle loads it and finds out.
    """
    if thread.id is None or not thread.messages:
        return False
    state = thread.layers.get(layer)
    return state is None or thread.messages[-1].seq > state.upto_seq


async def layer_state(ctx: MemoryContext, thread: StoredThread, layer: str) -> LayerState:
    """A layer's persisted state and cursor, read from the store once per hot thread."""
    cached = thread.layers.get(layer)
    if cached is not None:
        return cached
    thread_id = thread.id
    state = LayerState() if thread_id is None else await ctx.store.read(LayerStateOf(thread_id, layer))
    thread.layers[layer] = state
    return state
