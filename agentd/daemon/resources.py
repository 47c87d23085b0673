"""What every agent of one process shares, and the one constructor of a running agent.

`agentd run`, `agentd chat`, `agentd inspect`, the benchmarks and the test
harness all build agents here, from the same settings (agentd.yaml): the store
backend, the HTTP client, the providers, the embedder, the memory model
default. Nothing patches an agent afterwards; a test passes its fakes in.

The store backend: with `store.url` (or AGENTD_STORE_URL) one PostgreSQL
database holds every agent, the daemon's own audit as agent `_daemon`, and
several daemons may share it; without, one SQLite file per agent in the data
folder.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.config.models import AgentSpec, DaemonSpec
from agentd.daemon.observe import ObservedStore, Observer
from agentd.engine.agent import Agent
from agentd.engine.breakers import Breakers
from agentd.engine.hot_cache import HotBudget
from agentd.engine.linking import People
from agentd.engine.metered_embedder import MeteredEmbedder
from agentd.engine.metering import Meter
from agentd.engine.outbox import NoOutbox, Outbox
from agentd.engine.peers import NoPeers, Peers
from agentd.engine.rate_limits import RateLimiter
from agentd.engine.resources import AgentResources
from agentd.errors import OperatorError
from agentd.providers.base import Embedder, ModelProvider
from agentd.providers.embedders import build_embedder
from agentd.providers.registry import ProviderRegistry
from agentd.store.base import Leases, Store
from agentd.store.sqlite import SoleOwner, SqliteStore, StoreExecutor
from agentd.store.stop_asks import SoleDaemon, StopAsks
from agentd.tools.mcp_servers import McpServers

if TYPE_CHECKING:  # (imported when a store.url is set: psycopg is an optional extra)
    from agentd.store.postgres import PostgresBackend

DAEMON_STORE = "_daemon"  # daemon-level audit (config, auth); '_' cannot start an agent name
STORE_URL_ENV = "AGENTD_STORE_URL"  # the store.url setting, when agentd.yaml does not say it
_FROM_SETTINGS: Any = object()


def store_url_of(settings: DaemonSpec) -> str | None:
    """The PostgreSQL database agentd.yaml (store.url) or the environment names; None: SQLite files."""
    return settings.store.url or os.environ.get(STORE_URL_ENV) or None


class Resources:
    """An async context manager: opened once per process, closed after every agent it built."""

    def __init__(
        self,
        settings: DaemonSpec,
        data_dir: Path,
        *,
        embedder: Embedder | None = _FROM_SETTINGS,
        providers: dict[str, ModelProvider] | None = None,
        breakers: Breakers | None = None,
        observer: Observer | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        """`embedder` and `providers` replace what agentd.yaml names (tests and benchmarks pass fakes);
        `breakers` the memory models' breakers (tests pass ones with their own pauses); `observer`
        is told of committed runs, model calls and store commits (the daemon's log line and metrics)."""
        self.settings = settings
        self.data_dir = data_dir
        self._embedder_override = embedder
        self._provider_overrides = dict(providers or {})
        self._stack = contextlib.AsyncExitStack()
        # this process among the daemons that may share a store: recorded on its runs and audit events
        self.daemon_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.leases: Leases = SoleOwner(self.daemon_id)  # of bot connections among daemons sharing a store
        self.stop_asks: StopAsks = SoleDaemon(self.daemon_id)  # /stop asked of the daemon running the turn
        self.breakers = breakers or Breakers()  # per memory model, shared by every agent of the process
        self.observer = observer
        self.clock = clock  # what scheduled jobs read the time from (tests pass a clock they move)
        # where a run resumed after an approval posts its answer: the daemon sets its fleet here
        self.outbox: Outbox = NoOutbox()
        self.http: httpx.AsyncClient | None = None  # the providers' client, once open
        self.people = People()  # accounts linked into people; the daemon keeps them in its own store
        # budgets, usage and rate limits over the daemon's own store: the daemon sets them once it is open
        self.meter: Meter | None = None
        self.rate_limiter: RateLimiter | None = None
        self.executor: StoreExecutor | None = None
        self.postgres: PostgresBackend | None = None
        self.providers: ProviderRegistry | None = None
        self.embedder: Embedder | None = None
        # every agent's hot threads share one byte budget
        self.hot_budget = HotBudget(int(settings.store.hot_cache_mb * 2**20))

    @property
    def store_url(self) -> str | None:
        return store_url_of(self.settings)

    async def __aenter__(self) -> Resources:
        try:
            await self._open_store()
        except BaseException:
            await self._stack.aclose()
            raise
        observer = self.observer
        client = await self._stack.enter_async_context(httpx.AsyncClient())
        self.http = client  # also for the webhook's signed questions (agentd.daemon.asking)
        providers = ProviderRegistry(
            self.settings.providers, client, report_calls=observer.model_call if observer else None
        )
        for name, provider in self._provider_overrides.items():
            providers.register(name, provider)
        self.providers = providers
        if self._embedder_override is not _FROM_SETTINGS:
            self.embedder = self._embedder_override
        elif self.settings.embedder:
            self.embedder = build_embedder(self.settings.embedder, self.settings.providers, client)
        return self

    async def _open_store(self) -> None:
        url = self.store_url
        if url is None:
            executor = StoreExecutor(
                self.settings.store.max_open_files, self.settings.store.close_idle_after_s
            )
            self._stack.callback(executor.shutdown)
            if self.observer is not None:
                executor.on_commit = self.observer.store_commit
            self.executor = executor
            return
        try:
            from agentd.store.postgres import PostgresBackend
        except ImportError as e:
            raise OperatorError(
                f"store.url names a PostgreSQL database, but its driver is not installed ({e}): "
                "pip install 'agentd[postgres]'"
            ) from None
        store = self.settings.store
        backend = PostgresBackend(url, daemon=self.daemon_id, lease_s=store.lease_s, pooler=store.pooler)
        if self.observer is not None:
            backend.executor.on_commit = self.observer.store_commit
        self.postgres = await self._stack.enter_async_context(backend)
        self.leases = backend.leases  # (bot connections: one daemon of those sharing the database)
        self.stop_asks = backend.stop_asks

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    @property
    def shared_store(self) -> bool:
        """True when the store is one several daemons share (PostgreSQL); SQLite files have one owner."""
        return self.postgres is not None

    def store(self, name: str, *, readonly: bool = False) -> Store:
        """The store of the agent (or `_daemon`) `name`; not opened yet."""
        store: Store
        if self.postgres is not None:
            store = self.postgres.store(name, readonly=readonly)
        else:
            assert self.executor is not None, "Resources used outside `async with`"
            path = self.data_dir / f"{name}.sqlite"
            store = SqliteStore(
                path, self.executor, self.settings.store.synchronous, readonly=readonly, daemon=self.daemon_id
            )
        return store if self.observer is None else ObservedStore(store, name, self.observer)

    async def stored_names(self) -> list[str]:
        """Every store holding data, sorted: each agent's that ever stored anything (its file still there
        or not) and the daemon's own (`_daemon`)."""
        if self.postgres is not None:
            return await self.postgres.agent_names()
        return sorted(path.stem for path in self.data_dir.glob("*.sqlite"))

    def agent_resources(self, peers: Peers | None = None) -> AgentResources:
        assert self.providers is not None, "Resources used outside `async with`"
        return AgentResources(
            providers=self.providers,
            embedder=self._metered_embedder(),
            memory_extractor_model=self.settings.memory_extractor_model,
            hot_budget=self.hot_budget,
            peers=peers if peers is not None else NoPeers(),
            breakers=self.breakers,
            outbox=self.outbox,
            people=self.people,
            meter=self.meter,
            rate_limiter=self.rate_limiter,
            clock=self.clock,
            stop_asks=self.stop_asks,
        )

    def _metered_embedder(self) -> Embedder | None:
        """The embedder, its calls charged when the daemon has a meter (GET /usage shows them)."""
        if self.embedder is None or self.meter is None:
            return self.embedder
        return MeteredEmbedder(self.embedder, self.meter, self.settings.embedder or self.embedder.id)

    async def store_problem(self, timeout_s: float) -> str | None:
        """Why the store cannot serve now (None: it can), fit to show anyone: for readiness."""
        if self.postgres is not None:
            return await self.postgres.ping(timeout_s)
        if not os.access(self.data_dir, os.W_OK | os.X_OK):
            return "the data folder cannot be written"
        return None

    def stats(self) -> dict[str, Any]:
        """What the process holds for all its agents: open files, the hot threads' memory."""
        return {
            "files": self.executor.files.stats() if self.executor is not None else None,
            "hot_threads": self.hot_budget.stats(),
        }

    async def close_idle_files(self) -> None:
        if self.executor is not None:
            await self.executor.close_idle_files()

    def build_agent(self, spec: AgentSpec, peers: Peers | None = None, *, readonly: bool = False) -> Agent:
        """A running agent's parts, not opened yet (`await agent.open()`: it starts the MCP servers)."""
        store = self.store(spec.name, readonly=readonly)
        return Agent(spec, store, self.agent_resources(peers), McpServers(spec.name))

    async def open_agent(
        self, spec: AgentSpec, peers: Peers | None = None, *, readonly: bool = False
    ) -> Agent:
        """The one constructor of a running agent: built and opened (its store closed again if opening fails)."""
        agent = self.build_agent(spec, peers, readonly=readonly)
        try:
            await agent.open(readonly=readonly)
        except BaseException:
            await agent.close()
            raise
        return agent
