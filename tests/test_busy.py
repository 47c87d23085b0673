"""busy: queue | collect (issue 19, section 3): messages that arrive while a turn runs, over real HTTP
to the fake model server (scripted to be slow); what is stored afterwards is checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.queries import ActiveThread, DeliverySeen
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.test_fallbacks import Clock, agent_on
from tests.test_overflow import settings

AGENT = """\
model: {name: gpt/mini}
memory: {scope: thread}
channels: {webhook: {}}
"""
KEY = "webhook:c"


async def say(agent: Agent, text: str, event_id: str | None = None) -> Reply:
    return await agent.handle(InboundEvent("bot", KEY, text, "webhook", user_id="ana", event_id=event_id))


async def stored(agent: Agent) -> list[tuple[str, str]]:
    thread = await agent.state.store.read(ActiveThread(KEY))
    return [(m.message.role, m.message.text) for m in thread.messages]


async def three_while_one_runs(agent: Agent, fake: FakeLLM, *replies: str) -> list[Reply]:
    fake.hang(0.5)  # then the default reply, "fake reply to: one"
    for text in replies:
        fake.reply(text)
    first = asyncio.create_task(say(agent, "one", "e1"))
    await wait_until(lambda: fake.requests, "the first model call")
    later = [asyncio.create_task(say(agent, text, f"e{i}")) for i, text in ((2, "two"), (3, "three"))]
    await wait_until(lambda: agent.state.locks.waiting(KEY) >= 1, "the later messages to wait")
    return [await first, *[await t for t in later]]


async def test_collect_answers_what_arrived_during_the_run_in_one_turn(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), AGENT + "busy: collect\n") as agent:
            first, second, third = await three_while_one_runs(agent, fake, "Both answered.")
            assert first.text == "fake reply to: one"
            assert second.text == third.text == "Both answered." and second.run_id == third.run_id
            # one model call read both later messages
            assert len([r for r in fake.requests if r.path == "/v1/chat/completions"]) == 2
            last = fake.requests[-1].json["messages"]
            assert [m["content"] for m in last if m["role"] == "user"][-2:] == ["two", "three"]
            assert await stored(agent) == [
                ("user", "one"),
                ("assistant", "fake reply to: one"),
                ("user", "two"),
                ("user", "three"),
                ("assistant", "Both answered."),
            ]
            runs = [r for r in await agent.runs(KEY) if r["trigger"] == "message"]
            assert len(runs) == 2
            for event_id in ("e1", "e2", "e3"):  # each delivery is recorded: a redelivery is answered once
                assert await agent.state.store.read(DeliverySeen("webhook", event_id))
            assert (await say(agent, "three", "e3")).duplicate


async def test_queue_answers_each_message_in_its_own_turn(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), AGENT) as agent:
            replies = await three_while_one_runs(agent, fake, "To two.", "To three.")
            assert [r.text for r in replies] == ["fake reply to: one", "To two.", "To three."]
            assert [text for _, text in await stored(agent)] == [
                "one",
                "fake reply to: one",
                "two",
                "To two.",
                "three",
                "To three.",
            ]
