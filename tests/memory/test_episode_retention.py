"""Episodes over time: max_episodes and max_age_days per strategy, a person's episodes deleted on
request, and what /reset does to episodes (nothing: they are the person's, not the conversation's)."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.memory.episode_writes import Retention, forget_partition, sweep_retention
from agentd.memory.vectors import index_cache
from tests.memory.test_episodic import episodes, episodic, recalled_section, strategy_of
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

DAY = 86400.0


async def audit_rows(agent: Agent, action: str) -> list[dict[str, Any]]:
    return [e["data"] for e in await agent.audit_events(limit=1000) if e["action"] == action]


async def test_max_episodes_deletes_the_least_important_then_the_oldest(harness: Harness) -> None:
    agent, main = await episodic(harness, "{kind: episodic, write: tool, max_episodes: 2}")
    talk = say(agent, "webhook:c1", "u1")
    saved = [("Trivia: the kettle is blue.", 0.2), ("Dana's flight is on Friday.", 1.0),
             ("Dana's hotel is the Bristol.", 1.0), ("Dana likes green tea.", 0.5)]  # fmt: skip
    for text, importance in saved:
        main.call("save_episode", text=text, importance=importance).reply("saved")
        await talk(f"note: {text}")
    kept = [row[1] for row in await episodes(agent)]
    assert kept == ["Dana's flight is on Friday.", "Dana's hotel is the Bristol."]
    pruned = await audit_rows(agent, "prune_episodes")
    assert pruned == [  # counts, never text
        {"partition": "user:u1", "by_age": 0, "by_count": 1},
        {"partition": "user:u1", "by_age": 0, "by_count": 1},
    ]
    index = index_cache(agent.state.store).peek("user:u1", "hash/256")
    assert index is not None and index.size == 2  # the loaded index forgot them at once
    await talk("What is the kettle like, and what tea do I like?")
    assert "kettle" not in recalled_section(main) and "green tea" not in recalled_section(main)


async def test_max_age_days_hides_old_episodes_at_once_and_deletes_them_at_the_next_write(
    harness: Harness,
) -> None:
    agent, main = await episodic(harness, "{kind: episodic, max_age_days: 30}")
    strategy = strategy_of(agent)
    start = strategy.clock()
    talk = say(agent, "webhook:c1", "u1")
    await talk("My old bike lock code is 4411.")
    await agent.drain(5)
    strategy.clock = lambda: start + 31 * DAY
    await talk("What is my bike lock code?")
    assert "4411" not in main.requests[-1].system  # past retention: never recalled
    await agent.drain(5)  # that exchange was written: the write pruned the old episode
    assert [row[1] for row in await episodes(agent)] == ["User: What is my bike lock code?\nAssistant: "
                                                           "default reply to: What is my bike lock code?"]  # fmt: skip
    assert await audit_rows(agent, "prune_episodes") == [{"partition": "user:u1", "by_age": 1, "by_count": 0}]


async def test_a_sweep_prunes_partitions_nobody_writes_to(harness: Harness) -> None:
    agent, _ = await episodic(harness)
    await say(agent, "webhook:a", "ann")("Ann's note one.")
    await say(agent, "webhook:b", "bo")("Bo's note one.")
    await say(agent, "webhook:b", "bo")("Bo's note two.")
    await agent.drain(5)
    now = strategy_of(agent).clock()
    assert await sweep_retention(agent.state.store, agent.name, Retention(max_episodes=5), now) == 0
    assert await sweep_retention(agent.state.store, agent.name, Retention(max_episodes=1), now) == 1
    assert [row[1].splitlines()[0] for row in await episodes(agent)] == [
        "User: Ann's note one.",
        "User: Bo's note two.",
    ]
    assert await sweep_retention(agent.state.store, agent.name, Retention(max_age_days=1), now + 2 * DAY) == 2
    assert await episodes(agent) == []


async def test_one_persons_episodes_are_deleted_on_request_and_no_one_elses(harness: Harness) -> None:
    agent, main = await episodic(harness)
    await say(agent, "webhook:a", "ann")("My locker code is 1234.")
    await say(agent, "webhook:b", "bo")("My locker code is 9876.")
    await say(agent, "webhook:a", "ann")("What is my locker code?")  # loads ann's index
    assert "1234" in recalled_section(main)
    await agent.drain(5)  # the last exchange is an episode too by now
    now = strategy_of(agent).clock()
    deleted = await forget_partition(agent.state.store, agent.name, "user:ann", now, by="operator:cli")
    assert deleted == 2
    assert {row[0] for row in await episodes(agent)} == {"user:bo"}
    await say(agent, "webhook:a", "ann")("What is my locker code?")
    assert "1234" not in main.requests[-1].system  # forgotten at once, loaded index included
    assert await audit_rows(agent, "delete_episodes") == [
        {"partition": "user:ann", "deleted": 2, "by": "operator:cli"}
    ]
    await say(agent, "webhook:b", "bo")("What is my locker code?")
    assert "9876" in recalled_section(main)


async def test_reset_deletes_the_transcript_but_keeps_the_persons_episodes_without_duplicates(
    harness: Harness,
) -> None:
    agent, main = await episodic(harness)
    talk = say(agent, "webhook:c1", "u1")
    await talk("My cat is called Miso.")
    await talk("/reset")  # the exchange before it became an episode first (settled before commands)
    assert len(await episodes(agent)) == 1
    thread = await agent.state.threads.get("webhook:c1")
    assert thread.messages == []
    await talk("What is my cat called?")
    assert "Miso" in recalled_section(main)  # recall still finds what was said before /reset
    await agent.drain(5)
    texts = [row[1] for row in await episodes(agent)]
    assert len(texts) == 2 and texts[0].startswith("User: My cat is called Miso.")  # not written again
