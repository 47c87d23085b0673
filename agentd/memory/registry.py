"""Memory strategies by kind; built-ins register the way a plugin would (import path, loaded on use).

A strategy class is built as Class(spec, memory_spec, layer): `spec` is its
`memory.strategy` block (or a composite's layer), `memory_spec` the agent's
whole `memory:` block, `layer` a stable name for its rows in memory_state.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentd.config.models import AgentSpec, MemorySpec
from agentd.memory.base import MemoryStrategy
from agentd.memory.transcript import FullTranscript, NoHistory

STRATEGY_KINDS: dict[str, str] = {
    "none": "agentd.memory.transcript:NoHistory",
    "full": "agentd.memory.transcript:FullTranscript",
    "window": "agentd.memory.window:WindowMemory",
    "summarized": "agentd.memory.summarized:SummarizedMemory",
    "episodic": "agentd.memory.episodic:EpisodicMemory",
    "semantic": "agentd.memory.semantic:SemanticMemory",
    "state": "agentd.memory.state:StateMemory",
    "composite": "agentd.memory.composite:CompositeMemory",
}


def build_strategy(spec: Any, memory: MemorySpec, layer: str | None = None) -> MemoryStrategy:
    module_name, _, class_name = STRATEGY_KINDS[spec.kind].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    strategy: MemoryStrategy = cls(spec, memory, layer or spec.kind)
    return strategy


def strategy_for(agent: AgentSpec, override: Any = None) -> MemoryStrategy:
    """The agent's strategy: a sub-agent slot's override, else memory.strategy, else what scope says."""
    memory = agent.memory
    chosen = override if override is not None else memory.strategy
    if chosen is not None:
        return build_strategy(chosen, memory)
    if memory.scope == "thread":
        return FullTranscript(None, memory)
    return NoHistory()
