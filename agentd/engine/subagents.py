"""Sub-agents: other agents of the daemon offered to the model as tools (filled in by the sub-agent work)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.config.models import AgentSpec
from agentd.memory.tooling import Tool

if TYPE_CHECKING:
    from agentd.engine.runtime import AgentRuntime


def subagent_tools(runtime: AgentRuntime, spec: AgentSpec) -> list[Tool]:
    return []
