"""Pieces the model-driven layers share: which model may write structured memory, and cached layer state."""

from __future__ import annotations

from agentd.memory.base import MemoryContext
from agentd.store.memory_state import LayerState, get_layer_state
from agentd.store.transcripts import StoredThread

OFFLINE_PREFIX = "offline/"


def structured_model(ctx: MemoryContext, preferred: str | None) -> str | None:
    """The model for folds and extraction (strategy model > memory_extractor_model > the agent's).

    None when there is none, or only the offline model: it echoes what it is given
    and cannot write a patch or a fact list.
    """
    ref = ctx.memory_model(preferred)
    return None if ref is None or ref.startswith(OFFLINE_PREFIX) else ref


async def cached_layer_state(ctx: MemoryContext, thread: StoredThread, layer: str) -> LayerState:
    """A layer's persisted state and cursor, read from the file once per hot thread."""
    cached = thread.layers.get(layer)
    if isinstance(cached, LayerState):
        return cached
    thread_id = thread.id
    if thread_id is None:
        state = LayerState()
    else:
        state = await ctx.store.read(lambda conn: get_layer_state(conn, thread_id, layer))
    thread.layers[layer] = state
    return state


def cursor_behind(thread: StoredThread, layer: str) -> bool:
    """Whether the thread has messages past the layer's cursor (cheap: settle_due's check).

    A layer whose state is not loaded yet (a restart, an evicted thread) counts as behind:
    settle loads it and finds out.
    """
    if thread.id is None or not thread.messages:
        return False
    state = thread.layers.get(layer)
    return not isinstance(state, LayerState) or thread.messages[-1].seq > state.upto_seq
