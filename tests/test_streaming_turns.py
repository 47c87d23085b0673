"""Turns that a sink hears as they are written, through the whole engine over real HTTP to the fake model.

What the sink hears is only ever shown, never stored: the turn commits exactly
as a non-streamed one, after the last model call, and a stream broken off half
way stores the person's message and the failed run, and no half answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from agentd.messages import Message
from agentd.providers.openai import OpenAIProvider
from agentd.store.queries import ActiveThread
from testkit.fake_llm import FakeLLM
from testkit.sinks import Heard
from tests.support import Harness

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

SPEC = "purpose: You help.\nmemory: {scope: thread, persistent: true}\nmodel: fake/gpt-test\n"


class Broken:
    def delta(self, text: str) -> None:
        raise RuntimeError("the consumer went away")

    def restart(self) -> None:
        raise RuntimeError("the consumer went away")


@pytest.fixture
async def agent(harness: Harness, fake: FakeLLM) -> AsyncIterator[Agent]:
    async with httpx.AsyncClient(trust_env=False) as client:
        provider = OpenAIProvider(
            name="fake",
            kind="openai",
            client=client,
            base_url=fake.openai_base_url,
            api_key="k",
            max_retries=0,
        )
        yield await harness.agent(SPEC, providers={"fake": provider})


def event(text: str, key: str = "webhook:c1") -> InboundEvent:
    return InboundEvent("bot", key, text, "webhook", user_id="ana")


async def stored(agent: Agent, key: str = "webhook:c1") -> list[Message]:
    thread = await agent.state.store.read(ActiveThread(key))
    return [m.message for m in thread.messages]


async def last_run(agent: Agent) -> dict[str, object]:
    [run] = await agent.runs(limit=1)
    return run


async def test_the_sink_hears_the_reply_in_pieces_and_the_turn_is_stored_as_without_one(
    agent: Agent, fake: FakeLLM
) -> None:
    fake.reply("Lisbon is lovely.", pieces=["Lis", "bon is ", "lovely."], usage=(30, 5))
    heard = Heard()

    reply = await agent.handle(event("tell me"), sink=heard)

    assert heard.log == ["Lis", "bon is ", "lovely."]
    assert reply.text == heard.showing == "Lisbon is lovely."
    assert [m.text for m in await stored(agent)] == ["tell me", "Lisbon is lovely."]
    run = await last_run(agent)
    assert (run["status"], run["input_tokens"], run["output_tokens"]) == ("ok", 30, 5)
    fake.reply("Again.")
    assert (await agent.handle(event("and without a sink?"))).text == "Again."
    assert "stream" not in fake.requests[-1].json


async def test_text_before_a_tool_call_is_taken_back_with_a_restart(agent: Agent, fake: FakeLLM) -> None:
    fake.reply("Let me save that. ", tool_calls=[("remember", {"key": "city", "value": "Lisbon"})])
    fake.reply("Saved: city.")
    heard = Heard()

    reply = await agent.handle(event("I live in Lisbon"), sink=heard)

    assert "".join(heard.log) == "Let me save that. |Saved: city."
    assert reply.text == heard.showing == "Saved: city."
    roles = [m.role for m in await stored(agent)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert agent.state.persistent.keys() == ["city"]


async def test_a_stream_broken_half_way_stores_no_half_answer(agent: Agent, fake: FakeLLM) -> None:
    fake.reply("one two three four five", break_after=3)  # the role chunk and two words, then nothing
    heard = Heard()

    reply = await agent.handle(event("count"), sink=heard)

    # issue 19: what was shown stays (no restart), the failure is said after it, no fallback starts over
    assert heard.log == ["one ", "two "]
    assert reply.error == "provider_error" and reply.text.startswith("one two \n\n(The answer broke off")
    assert [m.text for m in await stored(agent)] == ["count"]  # the message is saved, no half answer
    run = await last_run(agent)
    assert run["status"] == "error" and "broke off" in str(run["error"])
    assert "after 8 characters of the reply were shown" in str(run["error"])
    fake.reply("five.")
    assert (await agent.handle(event("again"), sink=Heard())).text == "five."
    assert [m.text for m in await stored(agent)] == ["count", "again", "five."]


async def test_commands_answer_at_once_and_the_sink_hears_nothing(agent: Agent) -> None:
    heard = Heard()
    reply = await agent.handle(event("/help"), sink=heard)
    assert heard.log == [] and "/compact" in reply.text


async def test_a_sink_that_raises_never_fails_the_turn(agent: Agent, fake: FakeLLM) -> None:
    fake.reply("Still here.", pieces=["Still ", "here."])
    reply = await agent.handle(event("hello"), sink=Broken())
    assert reply.text == "Still here." and reply.error is None
    assert [m.text for m in await stored(agent)] == ["hello", "Still here."]


async def test_instructions_join_the_system_prompt_of_that_turn_only(agent: Agent, fake: FakeLLM) -> None:
    await agent.handle(event("first"), instructions="Answer in French.")
    await agent.handle(event("second"))

    with_them, without = (r.json["messages"][0] for r in fake.requests)
    assert with_them["role"] == "system" and with_them["content"].startswith("You help.")
    assert with_them["content"].endswith("Answer in French.")
    assert "French" not in without["content"]
    assert all("French" not in m.text for m in await stored(agent))


async def test_a_stateless_call_sees_what_the_caller_sent_and_keeps_only_its_run(
    agent: Agent, fake: FakeLLM
) -> None:
    earlier = [Message.user("my name is Ana"), Message.assistant("Hello Ana.")]
    heard = Heard()

    reply = await agent.answer_stateless(
        event("what is my name?", key="openai:(stateless)"), earlier, sink=heard, instructions="Be brief."
    )

    assert reply.text == heard.showing == "fake reply to: what is my name?"
    sent = fake.requests[0].json
    assert [m["content"] for m in sent["messages"][1:]] == [
        "my name is Ana",
        "Hello Ana.",
        "what is my name?",
    ]
    assert sent["messages"][0]["content"].endswith("Be brief.")
    assert "remember" in {t["function"]["name"] for t in sent["tools"]}  # the agent's own tools stay
    assert await stored(agent, "openai:(stateless)") == []
    assert await agent.conversations() == []
    run = await last_run(agent)
    assert (run["conversation_key"], run["status"], run["thread_id"]) == ("openai:(stateless)", "ok", None)


async def test_a_stateless_slash_line_is_text_for_the_model(agent: Agent, fake: FakeLLM) -> None:
    reply = await agent.answer_stateless(event("/reset", key="openai:(stateless)"), [])
    assert reply.text == "fake reply to: /reset"


async def test_the_offline_model_streams_through_the_engine(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread}\n")
    heard = Heard()
    reply = await agent.handle(event("hello there"), sink=heard)
    assert len(heard.log) > 3 and reply.text == heard.showing
    assert reply.text.endswith("You said: hello there")
