"""What the model will see on the next turn of a conversation: system prompt, summary, messages.

One function shared by `GET /agents/{agent}/conversations/{key}` and the /ui/
conversation page, so the two never disagree. (A stand-in until the engine
has a prompt builder of its own to call.)
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from agentd.engine.runtime import AgentRuntime
from agentd.engine.turn import build_system, persistent_scope
from agentd.memory.base import TurnInput
from agentd.memory.persistent import memory_preamble
from agentd.messages import MESSAGE_ADAPTER


async def next_turn(runtime: AgentRuntime, conversation_key: str) -> dict[str, Any]:
    """{agent, conversation_key, thread_id, strategy, system, summary, messages, context}."""
    spec = runtime.spec
    strategy = runtime.strategy(spec)
    thread = await runtime.threads.get(conversation_key)
    # Looking must not change what is looked at: a strategy's view() may update its cache on
    # the thread (episodic records the recall it just ran, which the inspector shows as the
    # last one), so the preview runs on copies of those caches.
    preview = dataclasses.replace(
        thread, layers={layer: copy.copy(cache) for layer, cache in thread.layers.items()}
    )
    # what the next turn would see; recall is searched with an empty query here
    view = await strategy.view(runtime, preview, TurnInput(conversation_key, "", None))
    sections = list(view.system_sections)
    if spec.memory.persistent:
        sections.append(memory_preamble(runtime.memory.keys(persistent_scope(spec, conversation_key, None))))
    threshold = getattr(strategy, "compact_at_tokens", None)
    return {
        "agent": runtime.name,
        "conversation_key": conversation_key,
        "thread_id": thread.id,
        "strategy": strategy.kind,
        "system": build_system(spec.purpose, sections),
        "summary": thread.summary,
        "messages": [MESSAGE_ADAPTER.dump_python(m, mode="json", exclude_none=True) for m in view.messages],
        "context": {
            "tokens": thread.last_input_tokens,
            "estimated": thread.last_tokens_estimated,
            "compact_at_tokens": threshold,
        },
    }
