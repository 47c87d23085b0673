"""Test support: agents built by the one constructor, on real SQLite files in a test's own data folder."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from agentd.config.loader import parse_agent
from agentd.config.models import AgentSpec, DaemonSpec
from agentd.daemon import Daemon
from agentd.daemon.resources import _FROM_SETTINGS, Resources
from agentd.engine.agent import Agent
from agentd.engine.breakers import Breakers
from agentd.engine.peers import Peers
from agentd.events import InboundEvent, Reply
from agentd.http.app import create_app
from agentd.providers.sse import ServerSentEvent, SSEDecoder
from agentd.store.queries import EpisodePartitions, Episodes, FactPartitions, Facts, ThreadHistory
from agentd.store.records import Episode, Fact
from testkit.serving import serve_on_loopback


def make_spec(yaml_text: str, name: str = "bot") -> AgentSpec:
    return parse_agent(Path(f"{name}.yaml"), text=yaml_text, env={})


class Harness:
    """Builds agents on files in one data folder (or, with `store_url`, in one PostgreSQL database),
    and can 'restart' them (close + reopen)."""

    def __init__(self, data: Path, store_url: str | None = None):
        self.data = data
        self.store_url = store_url
        self.agents: list[Agent] = []
        self._stack = contextlib.AsyncExitStack()
        self._built: dict[int, tuple[DaemonSpec, dict[str, Any], Any, Peers | None]] = {}

    async def agent(
        self,
        yaml_text: str,
        name: str = "bot",
        providers: dict[str, Any] | None = None,
        *,
        embedder: Any = None,
        settings: DaemonSpec | None = None,
        peers: Peers | None = None,
    ) -> Agent:
        """An agent on `yaml_text`; `providers` are in-process fakes by provider name, `embedder` the
        embedder agentd.yaml would configure, `settings` agentd.yaml itself."""
        return await self._open(
            make_spec(yaml_text, name), settings or DaemonSpec(), providers or {}, embedder, peers
        )

    async def _open(
        self,
        spec: AgentSpec,
        settings: DaemonSpec,
        providers: dict[str, Any],
        embedder: Any,
        peers: Peers | None,
    ) -> Agent:
        # Memory models that fail are tried again at the next chance here (no pause): the tests of
        # memory strategies pin down their retry logic; tests/test_breakers.py tests the pauses.
        if self.store_url is not None:
            settings = settings.model_copy(
                update={"store": settings.store.model_copy(update={"url": self.store_url})}
            )
        resources = Resources(
            settings, self.data, embedder=embedder, providers=providers, breakers=Breakers(first_pause_s=0)
        )
        await self._stack.enter_async_context(resources)
        agent = await resources.open_agent(spec, peers)
        self._built[id(agent)] = (settings, providers, embedder, peers)
        self.agents.append(agent)
        return agent

    async def restart(self, agent: Agent, *, embedder: Any = _FROM_SETTINGS) -> Agent:
        """Close the agent and open it again on the same file and fakes (optionally another embedder,
        as if agentd.yaml had changed across the restart)."""
        await agent.drain(5)
        await agent.close()
        settings, providers, old_embedder, peers = self._built[id(agent)]
        chosen = old_embedder if embedder is _FROM_SETTINGS else embedder
        return await self._open(agent.spec, settings, providers, chosen, peers)

    def file_of(self, agent: Agent) -> Path:
        """The agent's SQLite file (on the SQLite backend): where `sqlite_file` reads it raw."""
        assert self.store_url is None, "the agent's rows are in PostgreSQL"
        return self.data / f"{agent.name}.sqlite"

    async def close(self) -> None:
        for agent in self.agents:
            await agent.drain(5)
            await agent.close()
        await self._stack.aclose()


@contextlib.contextmanager
def sqlite_file(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to an SQLite file beside the store's own (autocommit, closed afterwards): only
    for tests of the file itself (its schema, its pragmas, every table a secret could hide in, an edit
    someone with the file would make), never to read what a query or the agent's own methods show."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def say(agent: Agent, key: str = "webhook:c1", user: str | None = "u1") -> Callable[..., Any]:
    async def _say(text: str, event_id: str | None = None, channel: str = "webhook") -> Reply:
        return await agent.handle(
            InboundEvent(agent.name, key, text, channel, user_id=user, event_id=event_id)
        )

    return _say


async def every_message(agent: Agent) -> list[dict[str, Any]]:
    """Every message the agent's store holds, of every thread (archived ones too), compacted or not, in
    thread then seq order: seq, role, user_id, run_id, compacted (agentd.store.queries.ThreadHistory)."""
    return [m for t in await agent.state.store.read(ThreadHistory()) for m in t["messages"]]


async def every_episode(agent: Agent) -> list[Episode]:
    """Every episode the agent's store holds, of every partition, embedded or not, in id order."""
    store = agent.state.store
    partitions = await store.read(EpisodePartitions())
    found = await store.read_many(*(Episodes(p) for p in partitions)) if partitions else []
    return sorted((e for listed in found for e in listed), key=lambda e: e.id)


async def every_fact(agent: Agent) -> list[Fact]:
    """Every semantic fact the agent's store holds, by partition then key."""
    store = agent.state.store
    partitions = await store.read(FactPartitions())
    found = await store.read_many(*(Facts(p) for p in partitions)) if partitions else []
    return sorted((f for listed in found for f in listed), key=lambda f: (f.partition, f.key))


def strategy_of(agent: Agent) -> Any:
    """The memory strategy the agent's ordinary conversations get (tests reach into it)."""
    return agent.state.memory_of(agent.spec, "webhook:c1").strategy


class LocalPeers:
    """Agents of one test that can call each other as sub-agents (the daemon's fleet does this for real)."""

    def __init__(self) -> None:
        self.agents: dict[str, Agent] = {}

    def add(self, *agents: Agent) -> None:
        self.agents.update({a.name: a for a in agents})

    def spec(self, name: str) -> AgentSpec | None:
        agent = self.agents.get(name)
        return agent.spec if agent is not None else None

    def running(self, name: str) -> bool:
        agent = self.agents.get(name)
        return agent is not None and agent.status == "running"

    async def delegate(self, name: str, event: InboundEvent, parent_run_id: str | None) -> Reply:
        return await self.agents[name].handle(event, parent_run_id)


async def open_api(
    root: Path, agents: dict[str, str], token: str | None = None
) -> tuple[Daemon, httpx.AsyncClient]:
    folder = root / "agents"
    folder.mkdir()
    for name, text in agents.items():
        (folder / f"{name}.yaml").write_text(text)
    if token:
        (root / "agentd.yaml").write_text(f"http:\n  token: {token}\n")
    daemon = Daemon(folder, root / "data", reload_interval=60)
    await daemon.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
    )
    return daemon, client


@contextlib.asynccontextmanager
async def serving(root: Path, agents: dict[str, str]) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    """open_api for the length of a `with`: the client closed and the daemon shut down after."""
    daemon, client = await open_api(root, agents)
    try:
        yield daemon, client
    finally:
        await client.aclose()
        await daemon.shutdown()


async def send(
    client: httpx.AsyncClient, agent: str, conversation: str, text: str, user_id: str = "ana"
) -> None:
    r = await client.post(
        f"/agents/{agent}/messages", json={"conversation_id": conversation, "text": text, "user_id": user_id}
    )
    assert r.status_code == 200, r.text


@contextlib.asynccontextmanager
async def daemon_on_loopback(
    root: Path, agents: dict[str, str], settings: str = ""
) -> AsyncIterator[tuple[Daemon, str]]:
    """A daemon on root/agents (and root/agentd.yaml = `settings`), its HTTP API served by uvicorn on
    127.0.0.1 as `agentd run` serves it; yields it and the API's base URL."""
    folder = root / "agents"
    folder.mkdir()
    for name, text in agents.items():
        (folder / f"{name}.yaml").write_text(text)
    if settings:
        (root / "agentd.yaml").write_text(settings)
    daemon = Daemon(folder, root / "data", reload_interval=60)
    await daemon.start()
    try:
        async with serve_on_loopback(create_app(daemon)) as url:
            yield daemon, url
    finally:
        await daemon.shutdown()


async def sse_events(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    """The Server-Sent Events of a streamed response, as they arrive."""
    decoder = SSEDecoder()
    async for line in response.aiter_lines():
        if (event := decoder.feed(line)) is not None:
            yield event


def agentd_cli(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`agentd ARGS` as a new user runs it, in `root`, with this Python; what it printed and its exit."""
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", *args],
        cwd=root,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
