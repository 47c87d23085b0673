"""What every agent of one process shares: providers, the embedder, the hot byte budget, peers, breakers.

Its own module because two read it that must not import each other: the agent's state
(state.py) builds its memory context once, and that context (context.py) calls models and
breakers through these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.engine.breakers import Breakers
from agentd.engine.hot_cache import HotBudget
from agentd.engine.linking import People
from agentd.engine.metering import Meter
from agentd.engine.outbox import NoOutbox, Outbox
from agentd.engine.peers import NoPeers, Peers
from agentd.engine.rate_limits import RateLimiter
from agentd.providers.base import Embedder
from agentd.providers.registry import ProviderRegistry
from agentd.store.stop_asks import SoleDaemon, StopAsks

DEFAULT_HOT_BYTES = 512 * 2**20  # store.hot_cache_mb's default


@dataclass
class AgentResources:
    """What every agent of one process shares, handed to each by the one constructor."""

    providers: ProviderRegistry
    embedder: Embedder | None = None
    memory_extractor_model: str | None = None  # agentd.yaml's default for folds and extraction
    # one byte budget for every agent's hot threads (store.hot_cache_mb)
    hot_budget: HotBudget = field(default_factory=lambda: HotBudget(DEFAULT_HOT_BYTES))
    peers: Peers = field(default_factory=NoPeers)
    breakers: Breakers = field(default_factory=Breakers)  # per memory model, daemon-wide
    outbox: Outbox = field(default_factory=NoOutbox)  # posts into conversations outside a reply
    people: People = field(default_factory=People)  # accounts linked into people, daemon-wide
    meter: Meter | None = None  # budgets and usage (agentd.engine.metering); None: calls are not counted
    rate_limiter: RateLimiter | None = None  # rate_limits: (agentd.engine.rate_limits); None: no limits
    clock: Clock = SYSTEM_CLOCK  # what scheduled jobs read the time from (tests move a ManualClock)
    # /stop reaching the daemon that runs the turn (a shared store); on a single-owner store, none other
    stop_asks: StopAsks = field(default_factory=lambda: SoleDaemon("this daemon"))
