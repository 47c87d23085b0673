"""summarized: a rolling summary refreshed every N messages as its own run, plus the messages since."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.memory.summarized import SUMMARY_HEADING, SummarizedMemory, count_foldable, foldable
from agentd.messages import Message, ToolCallPart, ToolResultPart
from agentd.providers.remembered import remembered_block
from agentd.store.queries import LayerStateOf
from agentd.store.records import StoredMessage
from testkit.scripted import ScriptedProvider
from tests.support import Harness, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def summarized_spec(every: int = 4, model: str | None = "sum/s", main: str = "main/m") -> str:
    model_field = f", model: {model}" if model else ""
    return (
        f"purpose: KEEP THE PURPOSE\nmodel: {main}\n"
        f"memory: {{strategy: {{kind: summarized, every: {every}{model_field}}}}}\n"
    )


async def setup(harness: Harness, every: int = 4) -> tuple[Agent, ScriptedProvider, ScriptedProvider]:
    main, summariser = ScriptedProvider("main"), ScriptedProvider("sum")
    agent = await harness.agent(summarized_spec(every), providers={"main": main, "sum": summariser})
    return agent, main, summariser


async def turn(agent: Agent, main: ScriptedProvider, i: int) -> None:
    main.reply(f"a{i}")
    await say(agent)(f"q{i}")
    await agent.drain(5)  # the refresh runs in the background after the reply


async def runs(agent: Agent, trigger: str) -> list[tuple[str, str, str | None]]:
    runs = await agent.runs(limit=1000)
    return [(r["model"], r["status"], r["error"]) for r in runs if r["trigger"] == trigger]


async def audit(agent: Agent, kind: str = "summary") -> list[tuple[str, dict[str, Any]]]:
    return [(e["action"], e["data"]) for e in await agent.audit_events(kind=kind, limit=1000)]


async def layer_state(agent: Agent, layer: str = "summarized") -> tuple[str | None, int]:
    thread = await agent.state.threads.get("webhook:c1")
    thread_id = thread.id
    assert thread_id is not None
    state = await agent.state.store.read(LayerStateOf(thread_id, layer))
    return state.data.get("summary"), state.upto_seq


async def test_refreshed_every_n_messages_as_a_summary_run(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=4)
    summariser.reply("SUMMARY ONE")
    for i in range(2):
        await turn(agent, main, i)
    assert summariser.requests == []  # 4 messages, but the latest turn always stays verbatim
    await turn(agent, main, 2)
    assert len(summariser.requests) == 1  # q0 a0 q1 a1 gathered past the latest turn
    folded = summariser.requests[0].messages[0].text
    assert "q0" in folded and "a1" in folded and "q2" not in folded
    assert summariser.requests[0].purpose == "summary"
    assert "KEEP THE PURPOSE" not in summariser.requests[0].system + folded
    assert await layer_state(agent) == ("SUMMARY ONE", 4)
    assert await runs(agent, "summary") == [("sum/s", "ok", None)]
    ok = await audit(agent)
    assert [a for a, _ in ok] == ["ok"] and ok[0][1]["upto_seq"] == 4 and ok[0][1]["messages"] == 4

    # the model sees the summary in the system prompt and the messages since the cursor
    await turn(agent, main, 3)
    seen = main.requests[-1]
    assert seen.system.startswith("KEEP THE PURPOSE")
    assert seen.system.endswith(remembered_block("rolling summary", SUMMARY_HEADING, "SUMMARY ONE"))
    assert [m.text for m in seen.messages] == ["q2", "a2", "q3"]
    assert len(summariser.requests) == 1  # q2 a2 only: not yet

    # the next refresh folds the summary so far with the newer messages
    summariser.reply("SUMMARY TWO")
    await turn(agent, main, 4)
    assert len(summariser.requests) == 2
    second = summariser.requests[1].messages[0].text
    assert "SUMMARY ONE" in second and "q2" in second and "a3" in second and "q0" not in second
    await turn(agent, main, 5)
    assert "SUMMARY TWO" in main.requests[-1].system and "SUMMARY ONE" not in main.requests[-1].system
    assert [m.text for m in main.requests[-1].messages] == ["q4", "a4", "q5"]
    assert [r[1] for r in await runs(agent, "summary")] == ["ok", "ok"]


async def test_a_failed_refresh_keeps_the_old_summary_and_the_messages(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=4)
    summariser.reply("OLD SUMMARY")
    for i in range(3):
        await turn(agent, main, i)
    assert await layer_state(agent) == ("OLD SUMMARY", 4)

    summariser.fail("HTTP 503 from the summariser", status=503)
    for i in range(3, 5):
        await turn(agent, main, i)
    assert len(summariser.requests) == 2
    assert await layer_state(agent) == ("OLD SUMMARY", 4)  # summary and cursor unchanged
    assert [r[1] for r in await runs(agent, "summary")] == ["ok", "error"]
    failed = [d for a, d in await audit(agent) if a == "failed"]
    assert len(failed) == 1 and "HTTP 503" in failed[0]["error"]

    # nothing is lost from view: the old summary plus every message since the cursor
    main.reply("a5")
    await say(agent)("q5")
    seen = main.requests[-1]
    assert "OLD SUMMARY" in seen.system
    assert [m.text for m in seen.messages] == ["q2", "a2", "q3", "a3", "q4", "a4", "q5"]
    # the failure is not retried before that turn (no new messages), only after it
    await agent.drain(5)
    assert len(summariser.requests) == 3
    assert await layer_state(agent) == ("default reply to: " + summariser.requests[2].messages[0].text, 10)


async def test_an_empty_summary_is_a_failed_refresh(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=2)
    summariser.reply("   ")
    for i in range(2):
        await turn(agent, main, i)
    assert await layer_state(agent) == (None, 0)
    assert await runs(agent, "summary") == [("sum/s", "error", "the model returned an empty summary")]
    assert [a for a, _ in await audit(agent)] == ["failed"]


async def test_restart_keeps_the_summary_and_its_cursor(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=4)
    summariser.reply("DURABLE SUMMARY")
    for i in range(3):
        await turn(agent, main, i)
    agent = await harness.restart(agent)
    main.reply("after restart")
    await say(agent)("q3")
    seen = main.requests[-1]
    assert "DURABLE SUMMARY" in seen.system
    assert [m.text for m in seen.messages] == ["q2", "a2", "q3"]
    await agent.drain(5)
    assert len(summariser.requests) == 1  # the restart did not trigger a refresh


async def test_reset_and_new_start_from_no_summary(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=2)
    summariser.reply("GONE AFTER RESET")
    for i in range(2):
        await turn(agent, main, i)
    assert (await layer_state(agent))[0] == "GONE AFTER RESET"
    await say(agent)("/reset")
    main.reply("fresh")
    await say(agent)("q9")
    assert "GONE AFTER RESET" not in main.requests[-1].system
    assert [m.text for m in main.requests[-1].messages] == ["q9"]


async def test_without_any_other_model_the_offline_model_summarises(harness: Harness) -> None:
    agent = await harness.agent(summarized_spec(every=2, model=None, main="offline"))
    for text in ("The deploy target is eu-west. Thanks.", "And the budget is small."):
        await say(agent)(text)
    await agent.drain(5)
    summary, upto = await layer_state(agent)
    assert upto == 2 and summary is not None and "The deploy target is eu-west." in summary
    assert await runs(agent, "summary") == [("offline/offline", "ok", None)]
    reply = await say(agent)("hello")
    assert "I see 2 earlier messages in this conversation and a summary of older turns" in reply.text


def test_the_cursor_never_splits_a_tool_call_from_its_result() -> None:
    call = Message(role="assistant", parts=(ToolCallPart(id="c", name="t", arguments={}),))
    result = Message(role="tool", parts=(ToolResultPart(call_id="c", name="t", content="r"),))
    thread = [
        StoredMessage(i + 1, m)
        for i, m in enumerate(
            [
                Message.user("q1"),
                call,
                result,
                Message.assistant("a1"),
                Message.user("q2"),
                call,
                result,
                call,
                result,
                Message.assistant("a2"),
            ]
        )
    ]
    chunk = foldable(thread, 0)
    assert [m.seq for m in chunk] == [1, 2, 3, 4]  # up to the latest turn, never into it
    assert count_foldable(thread, 0, 100) == 4 and count_foldable(thread, 0, 3) == 3
    assert foldable(thread, 4) == [] and count_foldable(thread, 4, 100) == 0
    assert foldable(thread[:4], 0) == []  # a single turn stays verbatim however long


async def test_inspect(harness: Harness) -> None:
    agent, main, summariser = await setup(harness, every=4)
    summariser.reply("INSPECTED")
    for i in range(3):
        await turn(agent, main, i)
    strategy = strategy_of(agent)
    assert isinstance(strategy, SummarizedMemory)
    described = await strategy.inspect(agent.context, await agent.state.threads.get("webhook:c1"))
    assert {k: described[k] for k in ("kind", "layer", "summary", "upto_seq", "every", "model")} == {
        "kind": "summarized",
        "layer": "summarized",
        "summary": "INSPECTED",
        "upto_seq": 4,
        "every": 4,
        "model": "sum/s",
    }
    assert [m["parts"][0]["text"] for m in described["messages"]] == ["q2", "a2"]
    assert described["refresh_due"] is False
