"""Hot threads: loaded in pages, once per key even when asked for concurrently."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agentd.engine import collector
from agentd.engine.conversations import HotThreads
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


async def test_concurrent_loads_share_one_thread_object(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread}\n")
    sent: list[str] = []
    for i in range(7):
        reply = await say(agent)(f"m{i}")
        sent += [f"m{i}", reply.text]  # what was said, in order, as it happened
    agent = await harness.restart(agent)
    first, second = await asyncio.gather(
        agent.state.threads.get("webhook:c1"), agent.state.threads.get("webhook:c1")
    )
    assert first is second
    assert [m.message.text for m in first.messages] == sent


async def test_a_long_thread_loads_in_pages(harness: Harness, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    agent = await harness.agent("memory: {scope: thread}\n")
    for i in range(12):
        await say(agent)(f"m{i}")
    agent = await harness.restart(agent)
    monkeypatch.setattr(HotThreads, "PAGE", 5)
    reads = 0
    original = agent.state.store.read

    async def counting(job):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await original(job)

    monkeypatch.setattr(agent.state.store, "read", counting)
    thread = await agent.state.threads.get("webhook:c1")
    assert [m.seq for m in thread.messages] == list(range(1, 25))
    assert reads == 1 + 5  # the header, then 24 messages in pages of 5
    reply = await say(agent)("after")
    assert "I see 24 earlier messages" in reply.text


async def test_a_long_thread_is_frozen_out_of_the_collector_and_still_freed(
    harness: Harness, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    agent = await harness.agent("memory: {scope: thread}\n")
    for i in range(6):
        await say(agent)(f"m{i}")
    agent = await harness.restart(agent)
    monkeypatch.setattr(collector, "LONG_LOAD", 10)  # 12 messages count as a long load
    gc.unfreeze()
    try:
        before = gc.get_freeze_count()
        thread = await agent.state.threads.get("webhook:c1")
        assert gc.get_freeze_count() > before + 12  # the messages left the collector's generations
        assert gc.isenabled()
        texts = [m.message.text for m in thread.messages]
        del thread
        for _ in range(3):
            await asyncio.sleep(0)  # the loop lets go of the last page read's future
        held = gc.get_freeze_count()
        agent.state.threads.drop("webhook:c1")
        # refcounting frees frozen objects too: its 12 messages are gone
        assert gc.get_freeze_count() <= held - 12
        assert texts[0] == "m0"
    finally:
        gc.unfreeze()
