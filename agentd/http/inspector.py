"""The memory inspector: per layer, what the model will see on the next turn of a conversation.

One function shared by `GET /agents/{agent}/conversations/{key}/memory`, the
`/ui/` pages and `agentd inspect`, so the three never disagree. Each strategy
describes itself (`MemoryStrategy.inspect`); this only gives every answer the
same shape: a composite already returns its `layers`, a single strategy
becomes the one layer.
"""

from __future__ import annotations

from typing import Any

from agentd.engine.runtime import AgentRuntime
from agentd.engine.turn import persistent_scope


async def inspect_conversation(runtime: AgentRuntime, conversation_key: str) -> dict[str, Any]:
    """{agent, conversation_key, thread_id, strategy, layers: [...], persistent?} for one conversation."""
    spec = runtime.spec
    strategy = runtime.strategy(spec)
    thread = await runtime.threads.get(conversation_key)
    described = await strategy.inspect(runtime, thread)
    layers = described.get("layers")
    if not isinstance(layers, list):
        layers = [described]
    out: dict[str, Any] = {
        "agent": runtime.name,
        "conversation_key": conversation_key,
        "thread_id": thread.id,
        "strategy": strategy.kind,
        "layers": layers,
    }
    if spec.memory.persistent:
        out["persistent"] = persistent_view(runtime, conversation_key)
    return out


def persistent_view(runtime: AgentRuntime, conversation_key: str) -> dict[str, Any]:
    """The persistent-memory keys the system prompt lists (values are pulled with `recall`)."""
    scope = runtime.spec.memory.persistent_scope
    if scope == "user":
        # each speaker sees only their own keys; the inspector has no speaker, so it names none
        return {"scope": "user", "keys": None, "note": "keys are per speaker: each person sees only theirs"}
    return {
        "scope": "agent",
        "keys": runtime.memory.keys(persistent_scope(runtime.spec, conversation_key, None)),
    }
