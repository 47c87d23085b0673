"""YAML files -> validated, frozen specs."""

from agentd.config.folder import check_agents, find_agent_file
from agentd.config.loader import parse_agent, parse_daemon
from agentd.config.models import AgentSpec, ChannelsSpec, DaemonSpec, MemorySpec, ModelSpec, ProviderSpec

__all__ = [
    "AgentSpec",
    "ChannelsSpec",
    "DaemonSpec",
    "MemorySpec",
    "ModelSpec",
    "ProviderSpec",
    "check_agents",
    "find_agent_file",
    "parse_agent",
    "parse_daemon",
]
