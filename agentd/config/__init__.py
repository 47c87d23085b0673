"""YAML files -> validated, frozen specs."""

from agentd.config.loader import check_dir, parse_agent, parse_daemon
from agentd.config.models import AgentSpec, ChannelsSpec, DaemonSpec, MemorySpec, ModelSpec, ProviderSpec

__all__ = [
    "AgentSpec",
    "ChannelsSpec",
    "DaemonSpec",
    "MemorySpec",
    "ModelSpec",
    "ProviderSpec",
    "check_dir",
    "parse_agent",
    "parse_daemon",
]
