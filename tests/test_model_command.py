"""/model (issue 19, section 3): a conversation's model shown and switched among models_allowed, over
real HTTP to the fake OpenAI and Anthropic APIs; the choice is stored (it survives a restart),
audited, shown in /status, and refused when the agent file allows no other model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.people import subject_of
from agentd.store.queries import ConversationModel
from testkit.fake_llm import FakeLLM
from tests.test_fallbacks import Clock, agent_on, store_url
from tests.test_overflow import settings

AGENT = """\
model: {name: gpt/mini}
memory: {scope: thread}
channels: {webhook: {}}
"""
ALLOWING = AGENT + "models_allowed: [claude/sonnet]\n"


async def say(agent: Agent, text: str, key: str = "webhook:c") -> Reply:
    return await agent.handle(InboundEvent("bot", key, text, "webhook", user_id="ana"))


async def model_commands(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"] for e in await agent.audit_events(kind="command") if e["action"] == "model"]


def paths(fake: FakeLLM) -> list[str]:
    return [r.path for r in fake.requests]


@pytest.mark.both_stores
async def test_model_switches_the_conversation_and_survives_a_restart(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = store_url(store_backend, request)
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING, store_url=url) as agent:
            shown = await say(agent, "/model")
            assert shown.text.startswith("Model: gpt/mini\nAllowed: gpt/mini, claude/sonnet")
            switched = await say(agent, "/model claude/sonnet")
            assert switched.text == "Model for this conversation: claude/sonnet (was gpt/mini)."
            fake.reply("From Claude.")
            assert (await say(agent, "hi")).text == "From Claude."
            assert paths(fake) == ["/v1/messages"]  # the Anthropic API answered
            fake.reply("From GPT.")
            assert (await say(agent, "hi", key="webhook:other")).text == "From GPT."  # only that conversation
            assert paths(fake)[-1] == "/v1/chat/completions"
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING, store_url=url) as agent:  # a restart
            status = await say(agent, "/status")
            assert "Model: claude/sonnet" in status.text
            fake.reply("Still Claude.")
            assert (await say(agent, "again")).text == "Still Claude."
            assert paths(fake)[-1] == "/v1/messages"
            runs = [r["model"] for r in await agent.runs("webhook:c") if r["trigger"] == "message"]
            assert runs == ["claude/sonnet", "claude/sonnet"]
            back = await say(agent, "/model default")
            assert back.text == "Model for this conversation: gpt/mini (was claude/sonnet)."
            fake.reply("GPT again.")
            assert (await say(agent, "and now")).text == "GPT again."
            assert paths(fake)[-1] == "/v1/chat/completions"
            changes = [d for d in await model_commands(agent) if d["result"] == "switched"]
            assert changes == [
                {"result": "switched", "from": "gpt/mini", "to": "claude/sonnet", "user_id": "ana"},
                {"result": "switched", "from": "claude/sonnet", "to": "gpt/mini", "user_id": "ana"},
            ]


async def test_model_refuses_a_model_the_file_does_not_allow(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING) as agent:
            refused = await say(agent, "/model openai/gpt-5")
            assert refused.text.startswith("Refused: openai/gpt-5 is not among this agent's models")
            fake.reply("GPT.")
            await say(agent, "hi")
            assert paths(fake) == ["/v1/chat/completions"]
            [data] = await model_commands(agent)
            assert data["result"] == "refused" and data["asked"] == "openai/gpt-5"


async def test_model_is_refused_when_the_file_allows_none(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), AGENT) as agent:
            assert "allows no other model" in (await say(agent, "/model")).text
            refused = await say(agent, "/model claude/sonnet")
            assert refused.text.startswith("Refused: this agent allows no other model")
            fake.reply("GPT.")
            await say(agent, "hi")
            assert paths(fake) == ["/v1/chat/completions"]


async def test_the_choice_goes_with_the_conversation_when_it_is_deleted_or_its_person_erased(
    tmp_path: Path,
) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING) as agent:
            for key in ("webhook:c", "webhook:d"):
                await say(agent, "/model claude/sonnet", key=key)
                assert await agent.state.store.read(ConversationModel(key)) == "claude/sonnet"
            await agent.delete_conversation("webhook:c", by="test")
            assert await agent.state.store.read(ConversationModel("webhook:c")) is None
            fake.reply("GPT.")
            await say(agent, "hi", key="webhook:c")
            assert paths(fake)[-1] == "/v1/chat/completions"  # the file's model again
            fake.reply("Claude.")
            await say(agent, "hello", key="webhook:d")  # a conversation that holds only ana's words
            await agent.erase_person("ana", subject_of("ana"), "test")
            assert await agent.state.store.read(ConversationModel("webhook:d")) is None
            assert "Model: gpt/mini" in (await say(agent, "/model", key="webhook:d")).text


@pytest.mark.both_stores
async def test_a_persons_export_lists_the_model_chosen_in_their_conversations(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = store_url(store_backend, request)
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING, store_url=url) as agent:
            await say(agent, "/model claude/sonnet", key="webhook:c")
            fake.reply("Claude.")
            await say(agent, "hi", key="webhook:c")
            fake.reply("GPT.")
            await say(agent, "hello", key="webhook:d")  # a conversation with the file's model
            data = await agent.person_data("ana")
            assert data is not None
            models = {c["conversation_key"]: c["model"] for c in data["conversations"] if not c["shared"]}
            assert models == {"webhook:c": "claude/sonnet", "webhook:d": None}
