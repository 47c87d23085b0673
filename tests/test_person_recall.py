"""Episodic and semantic recall follow a person across linked accounts: an episode and a fact made of
what Ana said on Slack are recalled when she writes on Telegram, never for Bob, and no longer once the
Telegram account is unlinked (each account keeps its own partition)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.daemon import Daemon
from agentd.events import InboundEvent
from agentd.store.queries import Facts
from tests.test_person_data import MemoryEcho, daemon_on

ANA_SLACK, ANA_TG, BOB_TG = "U012AB", "42", "99"
AGENTS = {
    "episodic": {"strategy": {"kind": "episodic", "write": "always"}},
    "semantic": {"strategy": {"kind": "semantic", "model": "mem/m"}},
}


def write_folder(root: Path, store_url: str | None) -> None:
    (root / "agents").mkdir(parents=True)
    for name, memory in AGENTS.items():
        (root / "agents" / f"{name}.yaml").write_text(
            f"model: mem/m\nmemory: {json.dumps(memory)}\nchannels: {{webhook: {{}}}}\n"
        )
    store = f"store: {{url: '{store_url}'}}\n" if store_url else ""
    (root / "agentd.yaml").write_text("embedder: hash/256\n" + store)


async def say(daemon: Daemon, agent_name: str, channel: str, user: str, text: str) -> None:
    agent = daemon.agent(agent_name)
    assert agent is not None
    event = InboundEvent(agent_name, f"{channel}:dm:{user}", text, channel, user_id=user)
    reply = await agent.handle(event)
    assert await agent.drain(10)  # the episode and the extraction after the reply
    assert reply.error is None, reply.error


async def shown(daemon: Daemon, model: MemoryEcho, agent: str, channel: str, user: str) -> str:
    """The system prompt the model is given for this speaker's question about the gate."""
    await say(daemon, agent, channel, user, "which gate was my flight to Porto leaving from")
    return next(r.system for r in reversed(model.requests) if r.purpose == "chat")


@pytest.mark.both_stores
async def test_episodes_and_facts_told_on_one_account_are_recalled_on_the_linked_one(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    write_folder(tmp_path, url)
    model = MemoryEcho()
    async with daemon_on(tmp_path, model) as (daemon, _):
        await daemon.people.link("ana", [f"slack:{ANA_SLACK}", f"telegram:{ANA_TG}"], "test", "test")
        for agent in AGENTS:
            await say(daemon, agent, "slack", ANA_SLACK, "my flight to Porto leaves from gate ANA-SECRET-7")
        semantic = daemon.agent("semantic")
        assert semantic is not None
        facts = await semantic.state.store.read(Facts(f"user:{ANA_SLACK}", 10))
        assert any("ANA-SECRET-7" in f.value for f in facts)  # stored under the account that said it

        for agent in AGENTS:
            assert "ANA-SECRET-7" in await shown(daemon, model, agent, "telegram", ANA_TG), agent
            assert "ANA-SECRET-7" not in await shown(daemon, model, agent, "telegram", BOB_TG), agent

        await daemon.people.unlink(f"telegram:{ANA_TG}", "test", "test")
        for agent in AGENTS:
            assert "ANA-SECRET-7" not in await shown(daemon, model, agent, "telegram", ANA_TG), agent
            assert "ANA-SECRET-7" in await shown(daemon, model, agent, "slack", ANA_SLACK), agent
