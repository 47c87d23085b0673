"""window: the last N messages, never an orphaned tool result, the purpose always kept."""

from __future__ import annotations

import pytest

from agentd.config.strategies import WindowStrategy
from agentd.memory.base import AfterRun
from agentd.memory.window import WindowMemory, window_start
from agentd.messages import Message, ToolCallPart, ToolResultPart
from agentd.store.records import StoredMessage
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_message, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def window_spec(n: int, persistent: bool = False) -> str:
    return (
        "purpose: ALWAYS KEEP THIS PURPOSE\nmodel: main/m\n"
        f"memory: {{persistent: {str(persistent).lower()}, strategy: {{kind: window, messages: {n}}}}}\n"
    )


def call(i: int) -> Message:
    return Message(role="assistant", parts=(ToolCallPart(id=f"c{i}", name="t", arguments={}),))


def result(i: int) -> Message:
    return Message(role="tool", parts=(ToolResultPart(call_id=f"c{i}", name="t", content="r"),))


def stored(messages: list[Message]) -> list[StoredMessage]:
    return [StoredMessage(i + 1, m) for i, m in enumerate(messages)]


# a thread with plain turns, a turn with two tool steps, a turn with one, and a plain turn
THREAD = stored(
    [
        Message.user("q1"),
        Message.assistant("a1"),
        Message.user("q2"),
        call(1),
        result(1),
        call(2),
        result(2),
        Message.assistant("a2"),
        Message.user("q3"),
        call(3),
        result(3),
        Message.assistant("a3"),
        Message.user("q4"),
        Message.assistant("a4"),
    ]
)


def assert_well_formed(window: list[StoredMessage]) -> None:
    """Every tool result's call is in the window, right before it."""
    for i, m in enumerate(window):
        if m.message.role == "tool":
            assert i > 0, "a window starts with an orphaned tool result"
            calls = {p.id for p in window[i - 1].message.tool_calls}
            assert {p.call_id for p in m.message.tool_results} <= calls


def test_every_size_gives_a_bounded_well_formed_suffix() -> None:
    for n in range(1, len(THREAD) + 3):
        start = window_start(THREAD, n)
        window = THREAD[start:]
        assert len(window) <= n
        assert_well_formed(window)
        if window and any(m.message.role == "user" for m in THREAD[-n:]):
            assert window[0].message.role == "user"  # the replay starts where a person spoke


def test_cut_positions() -> None:
    texts = lambda n: [m.seq for m in THREAD[window_start(THREAD, n) :]]  # noqa: E731
    assert texts(2) == [13, 14]  # exactly a turn
    assert texts(3) == [13, 14]  # lands on a3: moved forward to q4
    assert texts(5) == [13, 14]  # lands on the result of c3: call and result both out
    assert texts(6) == [9, 10, 11, 12, 13, 14]  # lands on q3: call and result both in
    assert texts(100) == list(range(1, 15))
    assert window_start([], 5) == 0


def test_a_run_longer_than_the_window_keeps_whole_steps() -> None:
    long_run = stored([Message.user("go"), call(1), result(1), call(2), result(2), Message.assistant("done")])
    assert [m.seq for m in long_run[window_start(long_run, 4) :]] == [4, 5, 6]  # no person's message in it
    assert [m.seq for m in long_run[window_start(long_run, 3) :]] == [4, 5, 6]
    assert [m.seq for m in long_run[window_start(long_run, 2) :]] == [6]  # c2/r2 both out
    assert [m.seq for m in long_run[window_start(long_run, 1) :]] == [6]


async def test_the_model_sees_the_purpose_and_only_the_last_messages(harness: Harness) -> None:
    model = ScriptedProvider("main")
    agent = await harness.agent(window_spec(4), providers={"main": model})
    talk = say(agent)
    for i in range(5):
        model.reply(f"a{i}")
        await talk(f"q{i}")
    seen = model.requests[-1]
    assert seen.system.startswith("ALWAYS KEEP THIS PURPOSE")
    assert [m.text for m in seen.messages] == ["q2", "a2", "q3", "a3", "q4"]
    # nothing is deleted: the whole transcript stays in the file
    count = len(await every_message(agent))
    assert count == 10
    # and a restart shows the same window
    agent = await harness.restart(agent)
    model.reply("a5")
    await say(agent)("q5")
    assert [m.text for m in model.requests[-1].messages] == ["q3", "a3", "q4", "a4", "q5"]


async def test_tool_calls_and_results_stay_together_through_a_real_run(harness: Harness) -> None:
    model = ScriptedProvider("main")
    agent = await harness.agent(window_spec(3, persistent=True), providers={"main": model})
    talk = say(agent)
    model.reply("hi")
    await talk("hello")
    model.call("list_memories").call("list_memories").reply("none held")
    await talk("what do you hold?")  # user, call, result, call, result, assistant
    model.reply("ok")
    await talk("thanks")
    seen = model.requests[-1].messages
    # the last 3 stored are the second step and the answer: a run longer than the window
    assert [m.role for m in seen] == ["assistant", "tool", "assistant", "user"]
    assert seen[0].tool_calls[0].id == seen[1].tool_results[0].call_id
    assert seen[2].text == "none held"
    model.reply("fine")
    await talk("bye")
    assert [m.text for m in model.requests[-1].messages] == ["thanks", "ok", "bye"]


async def test_inspect_shows_the_window(harness: Harness) -> None:
    model = ScriptedProvider("main")
    agent = await harness.agent(window_spec(2), providers={"main": model})
    for i in range(3):
        model.reply(f"a{i}")
        await say(agent)(f"q{i}")
    strategy = strategy_of(agent)
    assert isinstance(strategy, WindowMemory)
    assert not isinstance(strategy, AfterRun)  # a window has no work after a run
    described = await strategy.inspect(agent.context, await agent.state.threads.get("webhook:c1"))
    assert described["kind"] == "window" and described["layer"] == "window"
    assert described["window"] == 2 and described["first_seq"] == 5 and described["out_of_view"] == 4
    assert [m["parts"][0]["text"] for m in described["messages"]] == ["q2", "a2"]


def test_spec_model() -> None:
    assert WindowMemory(WindowStrategy(kind="window", messages=7)).size == 7
