"""What episodic recall shows the model: the exchange around a match, within its token budget,
the time things were said, answers above the questions they answer, dates named in a question."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from agentd.memory.dates import mentioned_periods, within
from agentd.memory.recall_section import HEADING
from agentd.memory.vectors import IndexedVector, VectorIndex, as_blob
from agentd.providers.embedders import HashEmbedder
from testkit.scripted import ScriptedProvider
from tests.memory.test_episodic import agent_yaml, episodes, last_recall, recalled_section
from tests.support import Harness, every_episode

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


async def episodic(
    harness: Harness, strategy: str = "{kind: episodic}", name: str = "bot"
) -> tuple[Agent, ScriptedProvider]:
    main = ScriptedProvider("main")
    agent = await harness.agent(
        agent_yaml(strategy), name=name, providers={"main": main}, embedder=HashEmbedder(256)
    )
    MODELS[name] = main
    return agent, main


MODELS: dict[str, ScriptedProvider] = {}  # each agent's model by agent name (a test's agents differ)


def at(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


async def feed(agent: Agent, lines: list[str], key: str = "webhook:feed", start: str = "2024-03-01") -> None:
    """Each line said by u1 in `key`, a minute apart from `start`, saved as it was said (write: tool)."""
    main = MODELS[agent.name]
    for n, line in enumerate(lines):
        main.call("save_episode", text=line).reply("ok")
        event = InboundEvent(agent.name, key, line, "webhook", user_id="u1", sent_at=at(start) + 60 * n)
        await agent.handle(event)


async def ask(agent: Agent, text: str, key: str = "webhook:ask") -> str:
    await agent.handle(InboundEvent(agent.name, key, text, "webhook", user_id="u1"))
    return recalled_section(MODELS[agent.name])


FILLER = [f"Filler line {n} about the weather and nothing in particular." for n in range(12)]


async def test_a_match_comes_with_what_was_said_around_it_in_the_order_it_was_said(harness: Harness) -> None:
    agent, _ = await episodic(harness, "{kind: episodic, write: tool, top_k: 1, neighbours: 1}")
    lines = [
        *FILLER[:5],
        "Any plans for the summer holidays?",
        "Researching adoption agencies.",
        *FILLER[5:9],
    ]
    await feed(agent, lines)
    section = await ask(agent, "What are my plans for the summer holidays?")
    # the reply that answers the question took over its relevance; the question shows as its neighbour
    assert section.splitlines() == [
        "[2024-03-01 00:05] Any plans for the summer holidays?",  # when it was said, once per snippet
        "  Researching adoption agencies.",
        f"  {FILLER[5]}",
    ]
    recall = await last_recall(agent, "webhook:ask")
    assert (
        recall["episodes"][0]["text"] == "Researching adoption agencies." and recall["episodes"][0]["answers"]
    )


async def test_an_answer_outranks_the_question_that_asked_for_it(harness: Harness) -> None:
    agent, _ = await episodic(harness, "{kind: episodic, write: tool, top_k: 2, neighbours: 0}")
    await feed(
        agent, [*FILLER[:3], "What is the name of your turtle?", "Shelly, she is three.", *FILLER[3:6]]
    )
    recall_section = await ask(agent, "What is the name of my turtle?")
    recall = await last_recall(agent, "webhook:ask")
    assert [e["text"] for e in recall["episodes"]] == [
        "Shelly, she is three.",
        "What is the name of your turtle?",
    ]
    assert recall_section.index("Shelly") < recall_section.index("What is the name")


async def test_with_question_weight_1_a_question_keeps_its_own_rank(harness: Harness) -> None:
    strategy = "{kind: episodic, write: tool, top_k: 2, neighbours: 0, question_weight: 1}"
    agent, _ = await episodic(harness, strategy)
    await feed(
        agent, [*FILLER[:3], "What is the name of your turtle?", "Shelly, she is three.", *FILLER[3:6]]
    )
    await ask(agent, "What is the name of my turtle?")
    recall = await last_recall(agent, "webhook:ask")
    assert recall["episodes"][0]["text"] == "What is the name of your turtle?"


async def test_neighbours_stay_in_their_conversation_and_the_budget_holds(harness: Harness) -> None:
    agent, _ = await episodic(
        harness, "{kind: episodic, write: tool, top_k: 1, neighbours: 3, recall_tokens: 60}"
    )
    await feed(agent, ["Other chat, first line.", "Other chat, second line."], key="webhook:other")
    await feed(agent, ["Short one.", "The boat is called Marlin.", "Short two.", "Short three."])
    section = await ask(agent, "What is my boat called?")
    assert "Marlin" in section and "Other chat" not in section
    assert len(HEADING) + len(section) <= 60 * 4  # the budget: the heading and the episodes quoted
    assert "Short one." in section and "Short two." in section  # nearest first, both sides
    roomy = await episodic(harness, "{kind: episodic, write: tool, top_k: 1, neighbours: 3}", name="roomy")
    await feed(roomy[0], ["Short one.", "The boat is called Marlin.", "Short two.", "Short three."])
    assert "Short three." in await ask(roomy[0], "What is my boat called?")


async def test_neighbours_0_shows_only_what_was_recalled(harness: Harness) -> None:
    agent, _ = await episodic(harness, "{kind: episodic, write: tool, top_k: 1, neighbours: 0}")
    await feed(agent, ["Short one.", "The boat is called Marlin.", "Short two."])
    section = await ask(agent, "What is my boat called?")
    assert section.splitlines() == ["[2024-03-01 00:01] The boat is called Marlin."]


async def test_a_date_in_the_question_prefers_what_was_said_then(harness: Harness) -> None:
    agent, _ = await episodic(harness, "{kind: episodic, write: tool, top_k: 1, neighbours: 0}")
    await feed(agent, ["We went hiking in the hills today."], start="2023-05-03")
    await feed(agent, ["We went hiking by the lake today."], key="webhook:feed2", start="2023-09-20")
    assert "hills" in await ask(agent, "Where did we go hiking on 3 May 2023?", key="webhook:ask2")
    assert "hills" in await ask(agent, "Where did we go hiking in May?", key="webhook:ask3")
    assert "lake" in await ask(agent, "Where did we go hiking on 20 September 2023?", key="webhook:ask4")
    assert "lake" in await ask(agent, "Where did we go hiking in September 2023?", key="webhook:ask5")


async def test_write_always_episodes_carry_the_time_the_message_was_sent(harness: Harness) -> None:
    agent, main = await episodic(harness)
    sent = at("2022-11-05T09:30")
    await agent.handle(
        InboundEvent(
            agent.name, "webhook:c1", "My passport expires in 2031.", "webhook", user_id="u1", sent_at=sent
        )
    )
    await agent.drain(5)
    rows = [(e.created_at,) for e in await every_episode(agent)]
    assert rows == [(sent,)]
    await agent.handle(
        InboundEvent(agent.name, "webhook:c2", "When does my passport expire?", "webhook", user_id="u1")
    )
    assert "[2022-11-05 09:30] User: My passport expires in 2031." in recalled_section(main)
    assert len(await episodes(agent)) == 2


def test_dates_a_question_names() -> None:
    (day,) = mentioned_periods("What did Gina find on 1 February, 2023?")
    assert day.start == at("2023-01-24") and day.end == at("2023-02-03")  # the week before, the day after
    (month,) = mentioned_periods("What happened in October 2023?")
    assert (month.start, month.end) == (at("2023-10-01"), at("2023-11-01"))
    assert mentioned_periods("on October 13, 2023")[0].start == at("2023-10-05")
    assert mentioned_periods("since 2021-06-30")[0].end == at("2021-07-02")
    (june,) = mentioned_periods("When did we go camping in June?")
    assert june.month_of_year == 6
    assert list(within([at("2019-06-10"), at("2019-07-10")], [june])) == [True, False]
    assert mentioned_periods("I have had them for 3 years, may I ask?") == []
    assert mentioned_periods("the 31 February 2023 party") == []  # not a date: ignored, not an error


def test_removing_rows_keeps_search_exact() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    index = VectorIndex.build(
        [IndexedVector(i + 1, float(i), 1.0, as_blob(v)) for i, v in enumerate(vectors)]
    )
    assert index.remove([3, 40, 17, 999]) == 3
    query = rng.standard_normal(8)
    kept = [i for i in range(1, 41) if i not in (3, 40, 17)]
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = sorted(kept, key=lambda i: -float(units[i - 1] @ (query / np.linalg.norm(query))))[:5]
    assert [i for i, _ in index.search(query, 5)] == expected
    assert index.size == 37 and 3 not in index and 17 not in index
    moved = index.position(39)  # a row moved into a hole keeps its own metadata
    assert moved is not None and index.created_at[moved] == 38.0


async def test_diversity_gives_a_two_part_question_both_parts(harness: Harness) -> None:
    lines = [
        "The blue car is parked in the garage by the door.",
        "The blue car is parked in the garage by the wall.",
        "The red bike is locked in the shed.",
    ]
    question = "Where is the blue car parked in the garage, and my bike?"
    same = "{kind: episodic, write: tool, top_k: 2, neighbours: 0, diversity: 0}"
    agent, _ = await episodic(harness, same)
    await feed(agent, lines)
    assert "bike" not in await ask(agent, question)  # the two near-copies outrank it
    spread, _ = await episodic(harness, same.replace("diversity: 0", "diversity: 0.9"), name="spread")
    await feed(spread, lines)
    assert "bike" in await ask(spread, question)
    recall = await last_recall(spread, "webhook:ask")
    assert recall["took_ms"] > 0 and recall["neighbours_shown"] == 0
