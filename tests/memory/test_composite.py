"""composite: layers consulted and written in order, no message shown twice, one failing layer isolated."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentd.config.models import MemorySpec
from agentd.config.strategies import CompositeStrategy
from agentd.engine.agent import Agent
from agentd.memory.base import MemoryView
from agentd.memory.composite import CompositeMemory, merge_views
from agentd.memory.summarized import SummarizedMemory
from agentd.memory.window import WindowMemory
from agentd.messages import Message
from agentd.store.queries import LayerStateOf
from agentd.store.records import StoredThread
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_message, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def composite_spec(*layers: str) -> str:
    return (
        "purpose: THE PURPOSE\nmodel: main/m\n"
        f"memory: {{strategy: {{kind: composite, layers: [{', '.join(layers)}]}}}}\n"
    )


async def turns(agent: Agent, main: ScriptedProvider, start: int, stop: int) -> None:
    for i in range(start, stop):
        main.reply(f"a{i}")
        await say(agent)(f"q{i}")
        await agent.drain(5)


def texts(messages: Any) -> list[str]:
    return [m.text for m in messages]


def test_merge_keeps_every_section_in_order_and_the_longest_message_list() -> None:
    a, b, c = (Message.user(t) for t in "abc")
    merged = merge_views(
        [
            MemoryView(system_sections=["first"], messages=[b, c], notes=["n1"]),
            MemoryView(system_sections=["second", "third"], messages=[a, b, c]),
            MemoryView(messages=[c, b, a], notes=["n2"]),  # a tie goes to the earlier layer
            MemoryView(system_sections=["fourth"]),
        ]
    )
    assert list(merged.system_sections) == ["first", "second", "third", "fourth"]
    assert list(merged.messages) == [a, b, c]
    assert list(merged.notes) == ["n1", "n2"]
    assert list(merge_views([MemoryView(), MemoryView()]).messages) == []


async def test_window_plus_summarized(harness: Harness) -> None:
    main, summariser = ScriptedProvider("main"), ScriptedProvider("sum")
    agent = await harness.agent(
        composite_spec("{kind: window, messages: 2}", "{kind: summarized, every: 4, model: sum/s}"),
        providers={"main": main, "sum": summariser},
    )
    strategy = strategy_of(agent)
    assert isinstance(strategy, CompositeMemory) and strategy.keeps_transcript
    summariser.reply("ROLLING SUMMARY")
    await turns(agent, main, 0, 3)  # the summarized layer folds q0..a1 after the third turn
    thread = await agent.state.threads.get("webhook:c1")
    thread_id = thread.id
    assert thread_id is not None
    state = await agent.state.store.read(LayerStateOf(thread_id, "1:summarized"))
    assert (state.data, state.upto_seq) == ({"summary": "ROLLING SUMMARY"}, 4)

    await turns(agent, main, 3, 4)
    seen = main.requests[-1]
    assert seen.system.startswith("THE PURPOSE") and "ROLLING SUMMARY" in seen.system
    # window: [q2 a2]; summarized: [q2 a2] since its cursor — a tie, each message once
    assert texts(seen.messages) == ["q2", "a2", "q3"]
    await turns(agent, main, 4, 5)
    # window: [q3 a3]; summarized: [q2 a2 q3 a3] — the wider view, not both
    assert texts(main.requests[-1].messages) == ["q2", "a2", "q3", "a3", "q4"]

    described = await strategy.inspect(agent.context, thread)
    assert described["kind"] == "composite" and described["layer"] == "composite"
    assert [(d["kind"], d["layer"]) for d in described["layers"]] == [
        ("window", "0:window"),
        ("summarized", "1:summarized"),
    ]
    # the fifth turn made q2..a3 foldable: the layer refreshed its summary on top of the first one
    assert described["layers"][1]["upto_seq"] == 8
    assert described["layers"][1]["summary"].startswith("default reply to: Summary so far:\nROLLING SUMMARY")
    assert [m["parts"][0]["text"] for m in described["layers"][0]["messages"]] == ["q4", "a4"]


async def test_window_plus_full_shows_the_whole_transcript_once(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(
        composite_spec("{kind: window, messages: 2}", "{kind: full}"), providers={"main": main}
    )
    await turns(agent, main, 0, 4)
    assert texts(main.requests[-1].messages) == ["q0", "a0", "q1", "a1", "q2", "a2", "q3"]
    strategy = strategy_of(agent)
    described = await strategy.inspect(agent.context, await agent.state.threads.get("webhook:c1"))
    assert [d["kind"] for d in described["layers"]] == ["window", "full"]


async def test_no_layer_keeping_a_transcript_means_none_is_kept(harness: Harness) -> None:
    main = ScriptedProvider("main")
    agent = await harness.agent(composite_spec("{kind: none}"), providers={"main": main})
    assert not strategy_of(agent).keeps_transcript
    await turns(agent, main, 0, 2)
    assert texts(main.requests[-1].messages) == ["q1"]
    assert await every_message(agent) == []


async def test_a_failing_layer_does_not_stop_the_others(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    main, summariser = ScriptedProvider("main"), ScriptedProvider("sum")
    agent = await harness.agent(
        composite_spec(
            "{kind: summarized, every: 2, model: sum/s}", "{kind: summarized, every: 2, model: sum/s}"
        ),
        providers={"main": main, "sum": summariser},
    )
    strategy = strategy_of(agent)
    assert isinstance(strategy, CompositeMemory)
    first, second = (layer.strategy for layer in strategy.layers)
    assert isinstance(first, SummarizedMemory) and isinstance(second, SummarizedMemory)

    async def broken(ctx: Any, thread: StoredThread, run_id: str | None) -> None:
        raise RuntimeError("layer 0 is broken")

    first.settle = broken  # type: ignore[method-assign]
    summariser.reply("SECOND LAYER SUMMARY")
    with caplog.at_level(logging.ERROR, logger="agentd.memory.composite"):
        await turns(agent, main, 0, 2)
    assert "memory layer 0:summarized failed" in caplog.text
    thread_id = (await agent.state.threads.get("webhook:c1")).id
    assert thread_id is not None
    states = await agent.state.store.read_many(
        LayerStateOf(thread_id, "0:summarized"), LayerStateOf(thread_id, "1:summarized")
    )
    assert states[0].data == {} and states[1].data == {"summary": "SECOND LAYER SUMMARY"}


def test_layers_are_built_by_the_registry_with_their_own_names() -> None:
    spec = CompositeStrategy.model_validate(
        {"kind": "composite", "layers": [{"kind": "window", "messages": 3}, {"kind": "summarized"}]}
    )
    composite = CompositeMemory(spec, MemorySpec())
    window, summarized = (layer.strategy for layer in composite.layers)
    assert isinstance(window, WindowMemory) and window.layer == "0:window" and window.size == 3
    assert isinstance(summarized, SummarizedMemory) and summarized.layer == "1:summarized"


async def test_a_composite_with_episodic_by_registry_name(harness: Harness) -> None:
    pytest.importorskip("agentd.memory.episodic")
    main = ScriptedProvider("main")
    agent = await harness.agent(
        composite_spec("{kind: window, messages: 2}", "{kind: episodic, write: tool}"),
        providers={"main": main},
    )
    strategy = strategy_of(agent)
    assert isinstance(strategy, CompositeMemory)
    assert [(layer.kind, layer.strategy.layer) for layer in strategy.layers] == [
        ("window", "0:window"),
        ("episodic", "1:episodic"),
    ]
    await turns(agent, main, 0, 3)
    seen = main.requests[-1]
    assert texts(seen.messages) == ["q1", "a1", "q2"]  # the window's; episodic replays no transcript
    assert "save_episode" in [t.name for t in seen.tools]  # the layers' tools are offered
    described = await strategy.inspect(agent.context, await agent.state.threads.get("webhook:c1"))
    assert [d["kind"] for d in described["layers"]] == ["window", "episodic"]
