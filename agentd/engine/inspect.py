"""What an agent will do next in a conversation: the next prompt, and each memory layer's view.

One place for `GET /agents/{agent}/conversations/{key}` (the prompt),
`GET /agents/{agent}/conversations/{key}/memory`, the `/ui/` pages and
`agentd inspect` (the layers), so they never disagree with each other or
with the turn: both use the memory the conversation really gets (a sub-agent
slot's override included) and the turn's own prompt builder.
"""

from __future__ import annotations

from typing import Any

from agentd.engine.conversation import Conversation
from agentd.engine.prompt import build_prompt
from agentd.engine.state import AgentState
from agentd.memory.base import TurnInput
from agentd.messages import MESSAGE_ADAPTER
from agentd.tools.base import Tool
from agentd.tools.policy import Policy, Ruling


async def next_prompt(state: AgentState, conversation_key: str, user_id: str | None = None) -> dict[str, Any]:
    """What the next turn would send (recall is searched with no text here, so nothing is recalled)."""
    conv = await Conversation.open(state, conversation_key)
    spec, memory, thread = conv.spec, conv.memory, conv.thread
    prompt = await build_prompt(conv, TurnInput(conversation_key, "", user_id))
    threshold = memory.compaction.compact_at_tokens if memory.compaction is not None else None
    policy = Policy.of(spec)

    def decide(tool: Tool) -> Ruling:
        return policy.ruling(tool)

    return {
        "agent": spec.name,
        "conversation_key": conversation_key,
        "thread_id": thread.id,
        "strategy": memory.kind,
        "system": prompt.system,
        "summary": thread.summary,
        "messages": [MESSAGE_ADAPTER.dump_python(m, mode="json", exclude_none=True) for m in prompt.history],
        # the tools offered (what the policy does not deny), with where each comes from
        "tools": [
            {
                "name": t.name,
                "description": t.spec.description,
                "source": t.source,
                "decision": decide(t).decision,
            }
            for t in prompt.tools.values()
        ],
        "context": {
            "tokens": thread.last_input_tokens,
            "estimated": thread.last_tokens_estimated,
            "compact_at_tokens": threshold,
        },
    }


async def inspect_conversation(state: AgentState, conversation_key: str) -> dict[str, Any]:
    """{agent, conversation_key, thread_id, strategy, layers: [...], persistent?} for one conversation.

    Each strategy describes itself; a composite already returns its `layers`, a
    single strategy becomes the one layer.
    """
    conv = await Conversation.open(state, conversation_key)
    spec, memory, thread = conv.spec, conv.memory, conv.thread
    described = await memory.describe(conv.ctx, thread)
    layers = described.get("layers")
    if not isinstance(layers, list):
        layers = [described]
    out: dict[str, Any] = {
        "agent": spec.name,
        "conversation_key": conversation_key,
        "thread_id": thread.id,
        "strategy": memory.kind,
        "layers": layers,
    }
    if spec.memory.persistent:
        out["persistent"] = persistent_view(conv)
    return out


def persistent_view(conv: Conversation) -> dict[str, Any]:
    """The persistent-memory keys the system prompt lists (values are pulled with `recall`)."""
    spec = conv.spec
    if spec.memory.persistent_scope == "user":
        # each speaker sees only their own keys; the inspector has no speaker, so it names none
        return {"scope": "user", "keys": None, "note": "keys are per speaker: each person sees only theirs"}
    return {"scope": "agent", "keys": conv.agent.memory_keys(spec, conv.key, None)}
