"""/model (issue 19, section 3): a conversation's model shown and switched among models_allowed, over
real HTTP to the fake OpenAI and Anthropic APIs; the choice is stored (it survives a restart),
audited, shown in /status, and refused when the agent file allows no other model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from testkit.fake_llm import FakeLLM
from tests.test_fallbacks import Clock, agent_on
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


async def test_model_switches_the_conversation_and_survives_a_restart(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING) as agent:
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
        async with agent_on(tmp_path, settings(fake), Clock(), ALLOWING) as agent:  # a restart
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
