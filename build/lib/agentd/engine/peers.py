"""The other agents an agent can reach (as sub-agents), without knowing who hosts them.

The daemon gives each agent a `Peers`; `agentd chat` and `agentd inspect`
give one that reads definitions from the agents folder and runs nothing.
"""

from __future__ import annotations

from typing import Protocol

from agentd.config.models import AgentSpec
from agentd.events import InboundEvent, Reply


class Peers(Protocol):
    def spec(self, name: str) -> AgentSpec | None:
        """The current definition of the agent `name`, or None when there is none."""
        ...

    def running(self, name: str) -> bool:
        """Whether `name` can take a sub-agent call now."""
        ...

    async def delegate(self, name: str, event: InboundEvent, parent_run_id: str | None) -> Reply:
        """Run `event` on the agent `name` as a sub-agent call of the run `parent_run_id`."""
        ...


class NoPeers:
    """No other agents: sub-agent tools answer that the agent is not running."""

    def spec(self, name: str) -> AgentSpec | None:
        return None

    def running(self, name: str) -> bool:
        return False

    async def delegate(self, name: str, event: InboundEvent, parent_run_id: str | None) -> Reply:
        raise LookupError(f"no agent {name!r} here")
