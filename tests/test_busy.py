"""busy: queue | collect (issue 19, section 3): messages that arrive while a turn runs, over real HTTP
to the fake model server (scripted to be slow); what is stored afterwards is checked."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import httpx

from agentd.channels.telegram import TelegramChannel
from agentd.config.telegram import TelegramSpec
from agentd.daemon.host import AgentHost
from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.queries import ActiveThread, DeliverySeen
from testkit.fake_llm import FakeLLM
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until
from tests.channels.test_streamed_replies import ALICE
from tests.support import Harness
from tests.test_fallbacks import Clock, agent_on
from tests.test_overflow import settings
from tests.tools.support import agent_yaml, openai, stdio_server, tool_agent
from tests.tools.test_approvals import script_write

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
            assert not second.joined and third.joined  # a chat channel posts it once, for the first
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


@dataclass
class Owner:
    """What the daemon's AgentHost reads of a fleet entry: the agent's name and the agent."""

    name: str
    agent: Agent | None


async def test_collect_in_a_chat_channel_posts_the_one_reply_once(tmp_path: Path) -> None:
    """Telegram (its real client library against the fake): three messages, the last two sent while
    the first is answered: two replies in the chat, not three."""
    with FakeLLM() as fake:
        spec = AGENT + "busy: collect\n"
        async with agent_on(tmp_path, settings(fake), Clock(), spec) as agent, FakeTelegram() as telegram:
            host = AgentHost(Owner("bot", agent), asyncio.create_task)
            channel = TelegramChannel(
                "bot", TelegramSpec(token=telegram.token, api_base_url=telegram.api_base_url)
            )
            task = asyncio.create_task(channel.run(host))
            try:
                await wait_until(lambda: host.statuses.get("telegram", ("",))[0] == "running", "the channel")
                fake.hang(1.5)  # then the default reply, "fake reply to: one"
                fake.reply("Both answered.")
                telegram.send_text("one", user_id=ALICE)
                await wait_until(lambda: fake.requests, "the first model call")
                telegram.send_text("two", user_id=ALICE)
                last = telegram.send_text("three", user_id=ALICE)
                await wait_until(
                    lambda: telegram.calls_to("getUpdates")[-1].get("offset", 0) > last["update_id"],
                    "the channel to take both in",
                )
                shown = ["fake reply to: one", "Both answered."]
                await wait_until(lambda: telegram.visible(ALICE) == shown, "the two replies")
                await asyncio.sleep(0.2)  # (a third post would come at once: it would be here by now)
                assert telegram.visible(ALICE) == shown
            finally:
                await channel.stop()
                await asyncio.wait_for(task, 5)
            [key] = {r["conversation_key"] for r in await agent.runs(None)}
            thread = await agent.state.store.read(ActiveThread(key))
            assert [m.message.text for m in thread.messages] == [
                "one",
                "fake reply to: one",
                "two",
                "three",
                "Both answered.",
            ]


async def test_a_collected_turn_that_pauses_for_an_approval_records_every_delivery(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    yaml_text = agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"]) + "busy: collect\n"
    agent = await tool_agent(harness, openai(fake, client), yaml_text)

    async def said(text: str, event_id: str) -> Reply:
        return await agent.handle(
            InboundEvent(agent.name, KEY, text, "webhook", user_id="ana", event_id=event_id)
        )

    fake.hang(1.0)  # the first turn, then the default reply
    script_write(fake, "Saved.")
    first = asyncio.create_task(said("one", "p1"))
    await wait_until(lambda: fake.requests, "the first model call")
    later = [asyncio.create_task(said(text, eid)) for text, eid in (("save it", "p2"), ("please", "p3"))]
    await wait_until(lambda: agent.state.locks.waiting(KEY) >= 1, "the later messages to wait")
    await first
    asked, joined = [await t for t in later]
    assert asked.approval is not None and joined.approval == asked.approval and joined.joined
    for event_id in ("p1", "p2", "p3"):  # recorded when the run paused, not only at its end
        assert await agent.state.store.read(DeliverySeen("webhook", event_id)), event_id
    denied = await say_as(agent, f"/deny {asked.approval}")
    assert denied.error is None
    assert [t for _, t in await stored(agent)][:4] == ["one", "fake reply to: one", "save it", "please"]


async def say_as(agent: Agent, text: str) -> Reply:
    return await agent.handle(InboundEvent(agent.name, KEY, text, "webhook", user_id="ana"))
