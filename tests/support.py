"""Test support: build runtimes on real SQLite files in a test's own data folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from agentd.config.loader import parse_agent
from agentd.config.models import AgentSpec
from agentd.daemon import Daemon
from agentd.engine.runtime import AgentRuntime
from agentd.events import InboundEvent, Reply
from agentd.http.app import create_app
from agentd.providers.registry import ProviderRegistry
from agentd.store.db import AgentStore, StoreExecutor


def make_spec(yaml_text: str, name: str = "bot") -> AgentSpec:
    return parse_agent(Path(f"{name}.yaml"), text=yaml_text, env={})


class Harness:
    """Builds runtimes on files in one data folder, and can 'restart' them (close + reopen)."""

    def __init__(self, data: Path):
        self.data = data
        self.executor = StoreExecutor()
        self.runtimes: list[AgentRuntime] = []
        self.registries: list[ProviderRegistry] = []

    async def runtime(
        self, yaml_text: str, name: str = "bot", providers: dict[str, Any] | None = None
    ) -> AgentRuntime:
        registry = ProviderRegistry({})
        for provider_name, provider in (providers or {}).items():
            registry.register(provider_name, provider)
        self.registries.append(registry)
        runtime = AgentRuntime(
            make_spec(yaml_text, name), AgentStore(self.data / f"{name}.sqlite", self.executor), registry
        )
        await runtime.start()
        self.runtimes.append(runtime)
        return runtime

    async def restart(self, runtime: AgentRuntime) -> AgentRuntime:
        await runtime.drain(5)
        await runtime.close()
        fresh = AgentRuntime(runtime.spec, AgentStore(runtime.store.path, self.executor), runtime.providers)
        await fresh.start()
        self.runtimes.append(fresh)
        return fresh

    async def close(self) -> None:
        for runtime in self.runtimes:
            await runtime.drain(5)
            await runtime.close()
        for registry in self.registries:
            await registry.aclose()
        self.executor.shutdown()


def say(runtime: AgentRuntime, key: str = "webhook:c1", user: str | None = "u1") -> Callable[..., Any]:
    async def _say(text: str, event_id: str | None = None, channel: str = "webhook") -> Reply:
        return await runtime.handle(
            InboundEvent(runtime.name, key, text, channel, user_id=user, event_id=event_id)
        )

    return _say


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


async def send(
    client: httpx.AsyncClient, agent: str, conversation: str, text: str, user_id: str = "ana"
) -> None:
    r = await client.post(
        f"/agents/{agent}/messages", json={"conversation_id": conversation, "text": text, "user_id": user_id}
    )
    assert r.status_code == 200, r.text
