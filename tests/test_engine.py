"""Turns, ordering, dedupe, commands and the transcript, through the real engine and SQLite."""

from __future__ import annotations

import asyncio

import pytest

from agentd.engine.agent import Agent
from agentd.engine.upkeep import prune_deliveries
from agentd.events import InboundEvent
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest
from agentd.store.queries import ActiveThread
from testkit.scripted import ScriptedProvider
from testkit.waiting import wait_until
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

THREAD = "memory: {scope: thread}\nmodel: scripted/m\npurpose: Be brief.\n"


async def stored(agent: Agent, key: str = "webhook:c1") -> list[Message]:
    thread = await agent.state.store.read(ActiveThread(key))
    return [m.message for m in thread.messages]


async def test_a_turn_stores_everything_before_replying(harness: Harness) -> None:
    model = ScriptedProvider().reply("hi there")
    agent = await harness.agent(THREAD, providers={"scripted": model})
    reply = await say(agent)("hello")
    assert reply.text == "hi there" and reply.run_id
    assert [(m.role, m.text) for m in await stored(agent)] == [("user", "hello"), ("assistant", "hi there")]
    runs = [(r["id"], r["trigger"], r["status"], r["input_tokens"]) for r in await agent.runs(limit=1000)]
    assert runs == [(reply.run_id, "message", "ok", 10)]
    assert model.requests[0].system == "Be brief."


async def test_thread_scope_replays_history_and_none_scope_starts_blank(harness: Harness) -> None:
    model = ScriptedProvider()
    thread = await harness.agent(THREAD, "remembers", providers={"scripted": model})
    blank = await harness.agent("model: scripted/m\n", "forgets", providers={"scripted": model})
    for text in ("one", "two"):
        await say(thread)(text)
        await say(blank)(text)
    seen = [[m.text for m in r.messages] for r in model.requests]
    assert seen[2] == ["one", "default reply to: one", "two"]  # thread agent, second turn
    assert seen[3] == ["two"]  # scope none, second turn
    assert await stored(blank) == []


async def test_history_survives_a_restart(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(THREAD, providers={"scripted": model})
    await say(agent)("first")
    agent = await harness.restart(agent)
    await say(agent)("second")
    assert [m.text for m in model.requests[-1].messages] == ["first", "default reply to: first", "second"]


async def test_one_conversation_runs_in_order_others_concurrently(harness: Harness) -> None:
    order: list[str] = []
    gate = asyncio.Event()

    class Slow:
        name = "slow"

        async def complete(self, request: CompletionRequest) -> Completion:
            text = request.messages[-1].text
            order.append(f"start {text}")
            if text == "a1":
                await gate.wait()
            order.append(f"end {text}")
            return Completion(Message.assistant(f"re {text}"))

    agent = await harness.agent("memory: {scope: thread}\nmodel: slow/m\n", providers={"slow": Slow()})
    a = say(agent, "webhook:a")
    b = say(agent, "webhook:b")
    first = asyncio.create_task(a("a1"))
    await wait_until(lambda: "start a1" in order, "a1 to reach the model")
    second = asyncio.create_task(a("a2"))
    other = await b("b1")  # another conversation is not blocked by a1
    assert other.text == "re b1"
    assert "start a2" not in order
    gate.set()
    assert (await first).text == "re a1" and (await second).text == "re a2"
    assert order.index("end a1") < order.index("start a2")
    assert [m.text for m in await stored(agent, "webhook:a")] == ["a1", "re a1", "a2", "re a2"]


async def test_duplicate_delivery_is_answered_once_even_after_restart(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(THREAD, providers={"scripted": model})
    first, again = await asyncio.gather(
        say(agent)("hello", event_id="m1", channel="telegram"),
        say(agent)("hello", event_id="m1", channel="telegram"),
    )
    assert sorted([first.duplicate, again.duplicate]) == [False, True]
    agent = await harness.restart(agent)
    assert (await say(agent)("hello", event_id="m1", channel="telegram")).duplicate
    assert not (await say(agent)("hello", event_id="m1", channel="discord")).duplicate  # other platform
    assert len(model.requests) == 2
    assert len(await stored(agent)) == 4


async def test_provider_failure_replies_briefly_and_loses_nothing(harness: Harness) -> None:
    model = ScriptedProvider().reply("ok").fail("HTTP 500 upstream", status=500)
    agent = await harness.agent(THREAD, providers={"scripted": model})
    await say(agent)("first")
    reply = await say(agent)("second")
    assert reply.error == "provider_error" and "could not reach the model" in reply.text
    assert [m.text for m in await stored(agent)] == ["first", "ok", "second"]
    runs = [(r["status"], r["error"]) for r in await agent.runs(limit=1000)]
    assert runs[0] == ("ok", None) and runs[1][0] == "error" and "HTTP 500 upstream" in runs[1][1]
    assert (await say(agent)("third")).text == "default reply to: third"


async def test_tool_loop_is_bounded_by_max_tool_steps(harness: Harness) -> None:
    model = ScriptedProvider()
    for _ in range(5):
        model.call("list_memories")
    model.reply("done")
    spec = "memory: {scope: thread, persistent: true}\nmodel: scripted/m\nmax_tool_steps: 2\n"
    agent = await harness.agent(spec, providers={"scripted": model})
    reply = await say(agent)("go")
    assert len(model.requests) == 3
    assert model.requests[-1].tools == ()  # the last call may not call tools
    assert "stopped after 2 tool steps" in reply.text


async def test_channel_user_ids_travel_with_messages(harness: Harness) -> None:
    agent = await harness.agent(THREAD, providers={"scripted": ScriptedProvider()})
    await agent.handle(InboundEvent("bot", "discord:1", "hey", "discord", user_id="u42"))
    messages = await stored(agent, "discord:1")
    assert messages[0].user_id == "u42"


async def test_hot_reload_keeps_in_flight_runs_on_their_definition(harness: Harness) -> None:
    gate = asyncio.Event()
    systems: list[str] = []

    class Waits:
        name = "waits"

        async def complete(self, request: CompletionRequest) -> Completion:
            systems.append(request.system)
            await gate.wait()
            return Completion(Message.assistant("ok"))

    agent = await harness.agent("purpose: old\nmodel: waits/m\n", providers={"waits": Waits()})
    task = asyncio.create_task(say(agent)("x"))
    await wait_until(lambda: systems, "the first run to reach the model")
    from tests.support import make_spec

    agent.update_spec(make_spec("purpose: new\nmodel: waits/m\n"))
    gate.set()
    await task
    await say(agent)("y")
    assert systems == ["old", "new"]


async def test_tool_calls_past_the_limit_are_answered_so_the_transcript_stays_well_formed(
    harness: Harness,
) -> None:
    model = ScriptedProvider().call("list_memories").call("list_memories").call("list_memories")
    spec = "memory: {scope: thread, persistent: true}\nmodel: scripted/m\nmax_tool_steps: 2\n"
    agent = await harness.agent(spec, providers={"scripted": model})
    await say(agent)("go")
    messages = await stored(agent)
    calls = [p.id for m in messages for p in m.tool_calls]
    results = [p.call_id for m in messages for p in m.tool_results]
    assert calls == results and len(calls) == 3
    assert "limit of 2 tool steps" in messages[-1].tool_results[0].content


async def test_old_delivery_ids_are_pruned(harness: Harness) -> None:

    agent = await harness.agent(THREAD, providers={"scripted": ScriptedProvider()})
    await say(agent)("hello", event_id="m1", channel="telegram")
    assert await prune_deliveries(agent, 0) == 0  # nothing that old
    assert await prune_deliveries(agent, 2**40) == 1
