"""Memory strategies by kind; built-ins register the way a plugin would (import path, loaded on use).

A strategy class is built as Class(spec, memory_spec, layer): `spec` is its
`memory.strategy` block (or a composite's layer), `memory_spec` the agent's
whole `memory:` block, `layer` a stable name for its rows in memory_state.
"""

from __future__ import annotations

import pkgutil
from typing import Any

from agentd.config.models import AgentSpec, MemorySpec
from agentd.memory.base import Memory, MemoryStrategy
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


def strategy_class(kind: str) -> Any:
    """The class registered for `kind`, its module imported on first use."""
    return pkgutil.resolve_name(STRATEGY_KINDS[kind])


def build_strategy(spec: Any, memory: MemorySpec, layer: str | None = None) -> MemoryStrategy:
    cls = strategy_class(spec.kind)
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


def memory_for(agent: AgentSpec, override: Any = None) -> Memory:
    """The agent's strategy with its capabilities found (see `Memory`)."""
    return Memory.of(strategy_for(agent, override))
