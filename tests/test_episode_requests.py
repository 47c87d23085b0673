"""One person's episodes deleted on request (HTTP and CLI), and retention swept by the daemon (issue 10)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from agentd.cli import main
from agentd.daemon import Daemon
from agentd.events import InboundEvent
from agentd.http.app import create_app
from agentd.providers.embedders import HashEmbedder
from agentd.store.queries import AuditEvents
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

EPISODIC = "purpose: You help.\nmemory: {strategy: {kind: episodic}}\nchannels: {webhook: {}}\n"
DAY = 86400.0


def folder(root: Path) -> Path:
    (root / "agents").mkdir()
    (root / "agents" / "keeper.yaml").write_text(EPISODIC)
    (root / "agentd.yaml").write_text("embedder: hash/64\n")
    return root


async def test_delete_one_persons_episodes_over_http(tmp_path: Path) -> None:
    root = folder(tmp_path)
    async with Daemon(root / "agents", root / "data", reload_interval=60) as daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:

            async def say(user: str, text: str) -> str:
                body = {"conversation_id": f"c-{user}", "text": text, "user_id": user}
                answer = await client.post("/agents/keeper/messages", json=body)
                assert answer.status_code == 200, answer.text
                return str(answer.json()["reply"])

            await say("alice", "My locker code is 4471.")
            await say("bob", "My locker code is 9902.")
            agent = daemon.agent("keeper")
            assert agent is not None and await agent.drain(5)
            gone = await client.delete("/agents/keeper/people/alice/episodes")
            assert gone.status_code == 200 and gone.json()["deleted"] == 1
            assert "recalled" not in await say("alice", "What is my locker code?")  # nothing left of alice
            assert "recalled" in await say("bob", "What is my locker code?")  # bob's stay
            events = await agent.state.store.read(AuditEvents(kind="memory"))
            [deleted] = [e for e in events if e["action"] == "delete_episodes"]
            assert deleted["data"]["deleted"] == 1 and "4471" not in str(deleted)  # counts, never text
            assert (await client.delete("/agents/keeper/people/a%20b/episodes")).status_code == 400
            assert (await client.delete("/agents/nobody/people/alice/episodes")).status_code == 404


def test_forget_episodes_from_the_cli_without_a_daemon(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = folder(tmp_path)

    async def seed() -> None:
        async with Daemon(root / "agents", root / "data", reload_interval=60) as daemon:
            agent = daemon.agent("keeper")
            assert agent is not None
            for user in ("alice", "alice", "bob"):
                event = InboundEvent("keeper", f"webhook:{user}", "I like tea.", "webhook", user_id=user)
                await agent.handle(event)
            assert await agent.drain(5)

    asyncio.run(seed())
    args = [
        "forget-episodes",
        "keeper",
        "alice",
        "--agents",
        str(root / "agents"),
        "--data",
        str(root / "data"),
    ]
    assert main(args) == 0
    assert "deleted 2 episode(s) of alice from keeper" in capsys.readouterr().out


async def test_the_daemons_sweep_applies_retention_to_every_layer(harness: Harness) -> None:
    spec = (
        "memory: {strategy: {kind: composite, layers: [{kind: window, messages: 4},"
        " {kind: episodic, max_age_days: 5}]}}\n"
    )
    agent = await harness.agent(spec, embedder=HashEmbedder(64))
    for text in ("one", "two", "three"):
        await say(agent, "webhook:c", "ann")(f"note {text}")
    assert await agent.drain(5)
    assert await agent.sweep_episodes(time.time()) == 0  # none is old yet
    assert await agent.sweep_episodes(time.time() + 6 * DAY) == 3  # six days on, all three are
