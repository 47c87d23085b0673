"""Compaction: threshold on the last call's input tokens, summary + last two turns, one transaction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.store.queries import ActiveThread, ThreadHistory
from testkit.scripted import ScriptedProvider
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def spec(threshold: int | str = 1000, small: bool = False) -> str:
    model = "model: {name: main/m, small: small/s}\n" if small else "model: main/m\n"
    return f"purpose: KEEP THIS RULE\nmemory: {{scope: thread, compact_at_tokens: {threshold}}}\n{model}"


async def rows(agent: Agent) -> list[tuple[int, str, bool]]:
    """(seq, role, compacted) of every message the store holds, compacted ones too."""
    threads = await agent.state.store.read(ThreadHistory())
    return [(m["seq"], m["role"], m["compacted"]) for t in threads for m in t["messages"]]


async def runs(agent: Agent, *fields: str) -> list[tuple[Any, ...]]:
    return [tuple(r[f] for f in fields) for r in await agent.runs(limit=1000)]


async def audit(agent: Agent) -> list[dict[str, Any]]:
    return await agent.audit_events(limit=1000)


async def test_crossing_the_threshold_compacts_after_the_reply(harness: Harness) -> None:
    main = ScriptedProvider("main")
    small = ScriptedProvider("small")
    agent = await harness.agent(spec(1000, small=True), providers={"main": main, "small": small})
    talk = say(agent)
    for i in range(3):
        main.reply(f"answer {i}", usage=(100 * (i + 1), 5))
        await talk(f"question {i}")
    main.reply("answer 3", usage=(1000, 5))  # this call's input crosses the line
    reply = await talk("question 3")
    assert reply.text == "answer 3"  # the reply that crossed the line goes out normally
    await agent.drain(5)
    assert len(small.requests) == 1  # summarised by model.small
    summary_request = small.requests[0]
    assert "KEEP THIS RULE" not in summary_request.system + summary_request.messages[0].text
    assert (
        "question 0" in summary_request.messages[0].text
        and "question 2" not in summary_request.messages[0].text
    )
    # the next message sees the summary in the system prompt and the last two turns verbatim
    main.reply("after")
    await talk("question 4")
    seen = main.requests[-1]
    assert seen.system.startswith("KEEP THIS RULE")
    assert "default reply to:" in seen.system  # the small model's summary text
    assert [m.text for m in seen.messages] == [
        "question 2",
        "answer 2",
        "question 3",
        "answer 3",
        "question 4",
    ]
    # nothing deleted: the older rows are marked compacted
    assert [r[2] for r in await rows(agent)] == [True] * 4 + [False] * 6
    assert ("compaction", "small/s", "ok") in await runs(agent, "trigger", "model", "status")
    assert ("compaction", "ok") in [(e["kind"], e["action"]) for e in await audit(agent)]


async def test_below_the_threshold_nothing_happens(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(spec(1000), providers={"main": main})
    for i in range(5):
        main.reply("ok", usage=(999, 5))
        await say(agent)(f"q{i}")
    await agent.drain(5)
    assert all(not r[2] for r in await rows(agent))


async def test_a_failed_summary_changes_nothing_and_is_audited(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(spec(100), providers={"main": main})
    for i in range(3):
        main.reply(f"a{i}", usage=(50, 5))
        await say(agent)(f"q{i}")
    before = await rows(agent)
    main.fail("HTTP 503 overloaded", status=503)
    reply = await say(agent)("/compact")
    assert "Compaction failed and the transcript is unchanged" in reply.text
    assert await rows(agent) == before
    thread = await agent.state.store.read(ActiveThread("webhook:c1"))
    assert thread.summary is None and len(thread.messages) == 6
    assert any(
        e["kind"] == "compaction" and e["action"] == "failed" and "overloaded" in json.dumps(e["data"])
        for e in await audit(agent)
    )
    assert ("compaction", "error") in await runs(agent, "trigger", "status")


async def test_a_tool_call_is_never_separated_from_its_result(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(
        "memory: {scope: thread, persistent: true, compact_at_tokens: false}\nmodel: main/m\n",
        providers={"main": main},
    )
    talk = say(agent)
    await talk("q0")
    main.call("remember", key="k", value="v").reply("saved")
    await talk("remember it")
    main.call("recall", key="k").reply("it is v")
    await talk("what was it")
    await talk("q3")
    main.reply("summary text")
    assert "Compacted 6 older messages" in (await talk("/compact")).text
    thread = agent.state.threads.peek("webhook:c1")
    assert thread is not None
    kept = [m.message for m in thread.messages]
    assert kept[0].role == "user" and kept[0].text == "what was it"
    calls = [p.id for m in kept for p in m.tool_calls]
    results = [p.call_id for m in kept for p in m.tool_results]
    assert calls == results and calls


async def test_without_reported_usage_an_estimate_drives_the_trigger(harness: Harness) -> None:
    main = ScriptedProvider("main")
    small = ScriptedProvider("small").reply("they sent long lines of x", usage=None)
    agent = await harness.agent(spec(400, small=True), providers={"main": main, "small": small})
    long = "x" * 300  # ~75 tokens a message
    compactions = 0
    for i in range(12):
        main.reply("ok", usage=None)
        await say(agent)(f"{long} {i}")
        await agent.drain(5)
        thread = agent.state.threads.peek("webhook:c1")
        assert thread is not None
        if thread.summary is not None:
            compactions = i
            break
        assert thread.last_tokens_estimated and thread.last_input_tokens is not None
    assert compactions >= 3  # it fired, and not on the first messages
    assert thread.last_input_tokens is None  # the counter starts over after a compaction
    assert all(
        estimated
        for trigger, estimated in await runs(agent, "trigger", "tokens_estimated")
        if trigger == "message"
    )
    main.reply("ok", usage=None)
    await say(agent)("short")
    await agent.drain(5)
    assert len(small.requests) == 1  # it does not fire again on the next message


async def test_compaction_survives_restart(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(spec(10_000), providers={"main": main})
    for i in range(4):
        await say(agent)(f"q{i}")
    main.reply("THE SUMMARY")
    await say(agent)("/compact")
    agent = await harness.restart(agent)
    await say(agent)("again")
    last = main.requests[-1]
    assert "THE SUMMARY" in last.system
    assert next(m.text for m in last.messages) == "q2"


async def test_disabled_compaction_never_fires(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(spec("false"), providers={"main": main})
    for i in range(4):
        main.reply("ok", usage=(10**6, 1))
        await say(agent)(f"q{i}")
    await agent.drain(5)
    assert all(not r[2] for r in await rows(agent))
