"""Hot threads under one byte budget across agents, holding only the tail their memory reads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentd.config.http_store import StoreSpec
from agentd.config.models import DaemonSpec
from agentd.daemon.resources import Resources
from agentd.engine.agent import Agent
from agentd.engine.conversation import Conversation
from agentd.engine.prompt import build_prompt
from agentd.memory.base import TurnInput
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest, Usage
from agentd.store.queries import ActiveThread, MessagesPage
from testkit.scripted import ScriptedProvider
from testkit.waiting import wait_until
from tests.support import Harness, make_spec, say

KEY = "webhook:c1"
STATE = "spec: Keep the goal., fields: [{name: goal, description: the goal}]"
TAILS = {
    "window": "{kind: window, messages: 5}",
    "summarized": "{kind: summarized, every: 4, model: fold/m}",
    "state": f"{{kind: state, model: fold/m, {STATE}}}",
    "state without a fold model": f"{{kind: state, tail_messages: 2, {STATE}}}",  # cuts at a tool result
    "episodic": "{kind: episodic, write: always}",
    "composite": "{kind: composite, layers: [{kind: window, messages: 3}, {kind: summarized, every: 6, model: fold/m}]}",
}


async def talk(agent: Agent, main: ScriptedProvider, fold: ScriptedProvider, turns: int) -> None:
    offline = agent.spec.model.provider == "offline"
    for i in range(turns):
        text = f"q{i}"
        if i % 3 == 1:  # a turn with a tool step: what is kept never starts with a result without its call
            main.call("remember", key=f"k{i}", value="v")
            text = f"remember k{i}: v" if offline else text  # what the offline model answers with a call
        main.reply(f"a{i}")
        fold.reply(f'{{"goal": "g{i}"}}')  # a fold's patch (a summary takes it as its text)
        await say(agent, KEY)(text)
        assert await agent.drain(5)


async def prompt_over(agent: Agent, thread: Any) -> tuple[str, list[Message]]:
    spec = agent.spec
    memory = agent.state.memory_of(spec, KEY)
    prompt = await build_prompt(Conversation(agent.state, spec, memory, thread), TurnInput(KEY, "next", "u1"))
    return prompt.system, list(prompt.history)


@pytest.mark.parametrize("strategy", list(TAILS))
async def test_a_hot_thread_holds_only_the_tail_its_memory_reads_and_sees_the_same(
    harness: Harness, strategy: str
) -> None:
    main, fold = ScriptedProvider("main"), ScriptedProvider("fold")
    model = "offline" if strategy == "state without a fold model" else "main/m"  # offline cannot fold
    text = f"model: {model}\nmemory: {{persistent: true, strategy: {TAILS[strategy]}}}\n"
    agent = await harness.agent(text, providers={"main": main, "fold": fold})
    await talk(agent, main, fold, 14)
    for opened in (agent, await harness.restart(agent)):  # trimmed after turns, and loaded so
        memory = opened.state.memory_of(opened.spec, KEY)
        hot = await opened.state.thread(KEY, memory)
        whole = await opened.state.store.read(ActiveThread(KEY))
        assert len(hot.messages) < len(whole.messages) // 2
        assert [m.seq for m in hot.messages] == [m.seq for m in whole.messages][
            len(whole.messages) - len(hot.messages) :
        ]
        assert hot.chars == sum(m.message.char_count() for m in hot.messages)
        # what the model would see from the tail is what it would see from the whole transcript
        assert await prompt_over(opened, hot) == await prompt_over(opened, whole)


async def test_a_window_over_a_long_thread_reads_only_its_tail(harness: Harness) -> None:
    agent = await harness.agent("memory: {strategy: {kind: window, messages: 4}}\n")
    for i in range(60):
        await say(agent, KEY)(f"m{i}")
    agent = await harness.restart(agent)
    pages: list[MessagesPage] = []
    read = agent.state.store.read

    async def reading(query: Any) -> Any:
        if isinstance(query, MessagesPage):
            pages.append(query)
        return await read(query)

    agent.state.store.read = reading  # type: ignore[method-assign]
    reply = await say(agent, KEY)("after")
    assert "I see 4 earlier messages" in reply.text
    assert [(p.after_seq, p.limit) for p in pages] == [(120 - 32, 32)]  # 32 of 120 messages decoded
    assert len(agent.state.threads.peek(KEY).messages) == 4  # type: ignore[union-attr]


async def test_a_wider_memory_after_a_reload_loads_the_older_messages_again(harness: Harness) -> None:
    agent = await harness.agent("memory: {strategy: {kind: window, messages: 4}}\n")
    for i in range(10):
        await say(agent, KEY)(f"m{i}")
    assert len(agent.state.threads.peek(KEY).messages) == 4  # type: ignore[union-attr]
    agent.update_spec(make_spec("memory: {strategy: {kind: full}}\n"))
    reply = await say(agent, KEY)("after")
    assert "I see 20 earlier messages" in reply.text


async def test_one_byte_budget_for_every_agent_drops_the_least_recently_used(tmp_path: Path) -> None:
    settings = DaemonSpec(store=StoreSpec(hot_cache_mb=0.05))  # ~52 KB: a handful of short threads
    async with Resources(settings, tmp_path) as resources:
        agents = [await resources.open_agent(make_spec("memory: {scope: thread}\n", n)) for n in ("a", "b")]
        try:
            for i in range(4):
                for agent in agents:
                    for c in range(4):
                        await say(agent, f"webhook:c{c}")(f"m{i}")
                        stats = resources.hot_budget.stats()
                        assert stats["bytes"] <= stats["budget_bytes"]
                    await say(agents[0], "webhook:hot")(f"m{i}")  # used all along: never dropped
            stats = resources.hot_budget.stats()
            assert stats["evictions"] > 0 and stats["hits"] >= 7 and stats["misses"] > 8
            assert stats["entries"] == sum(len(a.state.threads) for a in agents) < 9
            assert agents[0].state.threads.peek("webhook:hot") is not None
            assert agents[0].state.threads.peek("webhook:c0") is None  # the least recently used
            # a dropped conversation comes back whole from its file
            assert "I see 8 earlier messages" in (await say(agents[0], "webhook:c0")("again")).text
        finally:
            for agent in agents:
                await agent.close()
        assert resources.hot_budget.stats()["bytes"] == 0  # closing gives the bytes back


class GatedModel:
    """Answers at once, except a message "slow", which waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = False

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.messages[-1].text == "slow":
            self.waiting = True
            await self.gate.wait()
        return Completion(Message.assistant("ok"), Usage(10, 5), "stop")


async def test_a_conversation_in_the_middle_of_a_turn_is_never_dropped(tmp_path: Path) -> None:
    # Dropped mid-turn, a reader would load a second copy without the turn's messages, and the
    # next turn would write over their seqs.
    model = GatedModel()
    settings = DaemonSpec(store=StoreSpec(hot_cache_mb=0.004))  # ~4 KB: about one short thread
    async with Resources(settings, tmp_path, providers={"main": model}) as resources:
        agent = await resources.open_agent(make_spec("model: main/m\nmemory: {scope: thread}\n"))
        try:
            await say(agent, "webhook:a")("first")
            slow = asyncio.create_task(say(agent, "webhook:a")("slow"))
            await wait_until(lambda: model.waiting, "the slow turn to reach the model")
            for other in ("b", "c", "d"):
                await say(agent, f"webhook:{other}")("hello")
            await agent.status_of("webhook:a")  # a reader
            model.gate.set()
            await slow
            await say(agent, "webhook:a")("after")
            transcript = [m["parts"][0]["text"] for m in await agent.transcript("webhook:a")]
            assert transcript == ["first", "ok", "slow", "ok", "after", "ok"]
        finally:
            await agent.close()
