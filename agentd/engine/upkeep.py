"""What the daemon sweeps in each agent from time to time: delivery ids old enough to forget, and
files past their retention. Only for an agent used since start: an idle agent's file is left closed
(what it holds is swept once it is used again)."""

from __future__ import annotations

from agentd.engine.agent import Agent
from agentd.engine.media import prune_media as prune_stored_media
from agentd.store.base import write_one
from agentd.store.writes import PruneDeliveries


async def prune_deliveries(agent: Agent, older_than: float) -> int:
    """Forget platform delivery ids received before `older_than`; returns how many."""
    if agent.data_state != "ready":
        return 0
    return await write_one(agent.state.store, PruneDeliveries(older_than))


async def prune_media(agent: Agent, now: float) -> int:
    """Files past media.keep_days go (audited); returns how many."""
    if agent.data_state != "ready":
        return 0
    return await prune_stored_media(agent.state.store, agent.name, agent.spec.media.keep_days, now)
