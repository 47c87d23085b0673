"""/stop and max_run_s (issue 19, section 3): a person stops the running turn, over real HTTP to the
fake model servers (scripted to be slow), and what is stored afterwards is checked.

The stopped run keeps the person's message, stores nothing the model had not finished (a streamed
reply only as far as it was shown, marked stopped), is audited, and the next message is answered
at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.channels.telegram import TelegramChannel
from agentd.config.telegram import TelegramSpec
from agentd.daemon.host import AgentHost
from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.queries import ActiveThread
from testkit.clock import ManualClock
from testkit.fake_llm import FakeLLM
from testkit.fake_telegram import FakeTelegram
from testkit.sinks import Heard
from testkit.waiting import wait_until
from tests.channels.test_streamed_replies import ALICE, STREAMING
from tests.support import Harness
from tests.test_fallbacks import Clock, agent_on, store_url
from tests.test_overflow import settings
from tests.tools.support import agent_yaml, openai, stdio_server, tool_agent

GPT = """\
model: {name: gpt/mini}
memory: {scope: thread}
channels: {webhook: {}}
"""
KEY = "webhook:c"


async def say(agent: Agent, text: str, sink: Heard | None = None, user: str = "ana") -> Reply:
    return await agent.handle(InboundEvent("bot", KEY, text, "webhook", user_id=user), sink=sink)


async def stored(agent: Agent) -> list[dict[str, Any]]:
    thread = await agent.state.store.read(ActiveThread(KEY))
    return [
        {"role": m.message.role, "text": m.message.text, "stopped": m.message.stopped}
        for m in thread.messages
    ]


async def runs(agent: Agent) -> list[tuple[str, str]]:
    return [(r["trigger"], r["status"]) for r in await agent.runs(KEY, limit=50)]


async def stops(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"] for e in await agent.audit_events(kind="run") if e["action"] == "stopped"]


@pytest.mark.both_stores
async def test_stop_during_a_slow_model_call_keeps_the_message_and_serves_the_next(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = store_url(store_backend, request)
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT, store_url=url) as agent:
            fake.hang(20)
            turn = asyncio.create_task(say(agent, "write me an essay"))
            await wait_until(lambda: fake.requests, "the model call")
            started = time.monotonic()
            answer = await say(agent, "/stop")
            reply = await turn
            assert time.monotonic() - started < 2  # not the 20 s the model would have taken
            assert answer.text.startswith("Stopped.")
            assert reply.error == "stopped" and reply.text == "(Stopped.)"
            assert await stored(agent) == [{"role": "user", "text": "write me an essay", "stopped": None}]
            [stop] = await stops(agent)
            assert stop == {
                "reason": "command",
                "by": "webhook:ana",
                "shown_chars": 0,
                "tool_calls_stopped": 0,
            }
            [command] = [e for e in await agent.audit_events(kind="command") if e["action"] == "stop"]
            assert command["data"]["stopped_run"] == reply.run_id
            fake.reply("Hello again.")
            started = time.monotonic()
            nxt = await say(agent, "hi")
            assert nxt.text == "Hello again." and time.monotonic() - started < 2
            assert await runs(agent) == [("message", "stopped"), ("command", "ok"), ("message", "ok")]
            assert [m["text"] for m in await stored(agent)] == ["write me an essay", "hi", "Hello again."]


async def test_stop_with_nothing_running_says_so(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            answer = await say(agent, "/stop")
            assert answer.text == "Nothing is running in this conversation."
            assert await runs(agent) == [("command", "ok")]
            assert await stops(agent) == []


async def test_stop_during_streaming_keeps_what_was_shown_marked_stopped(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            fake.reply("Once upon a time", pieces=["Once ", "upon ", "a ", "time"], delay=1.0)
            heard = Heard()
            turn = asyncio.create_task(say(agent, "tell me a story", heard))
            await wait_until(lambda: heard.showing == "Once ", "the first piece")
            await say(agent, "/stop")
            reply = await turn
            assert reply.error == "stopped"
            assert reply.text == "Once \n\n(Stopped.)"
            assert heard.showing == "Once "  # what was shown stays on the screen
            assert await stored(agent) == [
                {"role": "user", "text": "tell me a story", "stopped": None},
                {"role": "assistant", "text": "Once ", "stopped": True},
            ]
            [stop] = await stops(agent)
            assert stop["shown_chars"] == len("Once ")


async def test_max_run_s_stops_a_run_that_goes_past_it(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT + "max_run_s: 60\n") as agent:
            clock = agent.state.stops.clock = ManualClock()
            fake.hang(20)
            turn = asyncio.create_task(say(agent, "think hard"))
            await wait_until(lambda: fake.requests and clock.sleepers, "the model call")
            clock.advance(59)
            await asyncio.sleep(0.05)
            assert not turn.done()
            clock.advance(1)
            reply = await asyncio.wait_for(turn, 2)
            assert reply.error == "stopped"
            assert "went past its limit of 60 s" in reply.text
            assert await stored(agent) == [{"role": "user", "text": "think hard", "stopped": None}]
            [stop] = await stops(agent)
            assert stop["reason"] == "max_run_s" and stop["max_run_s"] == 60
            assert clock.sleepers == 0  # the watchdog went with the run


async def test_max_run_s_on_the_real_clock_stops_each_run_past_it(tmp_path: Path) -> None:
    """The daemon's own clock (a timer of the loop): a small limit, two runs in turn."""
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT + "max_run_s: 0.3\n") as agent:
            for text in ("first", "second"):
                fake.hang(20)
                started = time.monotonic()
                reply = await say(agent, text)
                assert reply.error == "stopped" and 0.25 < time.monotonic() - started < 3
            fake.reply("Quick.")
            assert (await say(agent, "third")).text == "Quick."  # a run within the limit is not stopped
            assert await runs(agent) == [("message", "stopped"), ("message", "stopped"), ("message", "ok")]


async def test_stop_during_a_slow_mcp_tool_cancels_the_call_on_the_server(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}))
    fake.reply(tool_calls=[("files__hang", {})])
    turn = asyncio.create_task(
        agent.handle(InboundEvent(agent.name, KEY, "do the slow thing", "webhook", user_id="ana"))
    )
    await wait_until(lambda: agent.state.stops.running_in(KEY) and len(fake.requests) == 1, "the tool call")
    await asyncio.sleep(0.3)  # the call reaches the server
    answer = await say_to(agent, "/stop")
    reply = await turn
    assert answer.text.startswith("Stopped.") and reply.error == "stopped"
    # the SDK sent notifications/cancelled: the server's handler was interrupted
    await wait_until(lambda: (root / "hang-cancelled").exists(), "the server to hear the cancellation")
    thread = await agent.state.store.read(ActiveThread(KEY))
    messages = [m.message for m in thread.messages]
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    [result] = messages[2].tool_results
    assert result.is_error and result.content == "not finished: the run was stopped"
    [stop] = await stops(agent)
    assert stop["tool_calls_stopped"] == 1
    # the next message is answered, and the stored history is one a provider accepts
    fake.reply("Sorry about that.")
    assert (await say_to(agent, "never mind")).text == "Sorry about that."
    sent = fake.requests[-1].json["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {}


async def say_to(agent: Agent, text: str) -> Reply:
    return await agent.handle(InboundEvent(agent.name, KEY, text, "webhook", user_id="ana"))


@dataclass
class Owner:
    """What the daemon's AgentHost reads of a fleet entry: the agent's name and the agent."""

    name: str
    agent: Agent | None


async def test_stop_in_a_channel_ends_its_edit_stream_at_what_was_shown(tmp_path: Path) -> None:
    """Telegram with `stream: true` (its real client library against the fake): the reply grows by
    edits, /stop sent in the chat overtakes the turn, the message ends as what was shown, marked."""
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent, FakeTelegram() as telegram:
            host = AgentHost(Owner("bot", agent), asyncio.create_task)
            spec = TelegramSpec(token=telegram.token, api_base_url=telegram.api_base_url, **STREAMING)
            channel = TelegramChannel("bot", spec)
            task = asyncio.create_task(channel.run(host))
            try:
                await wait_until(lambda: host.statuses.get("telegram", ("",))[0] == "running", "the channel")
                fake.reply("Once upon a time", pieces=["Once ", "upon ", "a ", "time"], delay=1.0)
                telegram.send_text("tell me a story", user_id=ALICE)
                await wait_until(lambda: telegram.visible(ALICE) == ["Once"], "the first edit")
                telegram.send_text("/stop", user_id=ALICE)
                shown = ["Once \n\n(Stopped.)", "Stopped. Your message is saved; send the next one."]
                await wait_until(lambda: telegram.visible(ALICE) == shown, "the stopped reply and the stop's")
            finally:
                await channel.stop()
                await asyncio.wait_for(task, 5)
            [key] = {r["conversation_key"] for r in await agent.runs(None)}
            thread = await agent.state.store.read(ActiveThread(key))
            assert [(m.message.role, m.message.text, m.message.stopped) for m in thread.messages] == [
                ("user", "tell me a story", None),
                ("assistant", "Once ", True),
            ]
            assert [(r["trigger"], r["status"]) for r in await agent.runs(key)] == [
                ("message", "stopped"),
                ("command", "ok"),
            ]
