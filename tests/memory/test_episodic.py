"""Episodic memory: hybrid recall per speaker, write always|tool, embedder faults, recency, restart."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from agentd.config.strategies import EpisodicStrategy
from agentd.engine.agent import Agent
from agentd.errors import ProviderError
from agentd.memory.base import TurnInput
from agentd.memory.episode_writes import exchanges_of
from agentd.memory.episodic import NO_EMBEDDER, EpisodicMemory
from agentd.memory.keywords import keyword_terms
from agentd.memory.recall_section import HEADING
from agentd.memory.vectors import IndexCache, IndexedVector, VectorIndex, as_blob, index_cache
from agentd.messages import Message, ToolCallPart, ToolResultPart
from agentd.providers.embedders import HashEmbedder
from agentd.providers.remembered import material_of
from agentd.store.queries import KeywordSearch, Vectors
from agentd.store.records import NewEpisode, StoredMessage
from agentd.store.sqlite.episode_reads import fts_match, keyword_search
from agentd.store.sqlite.episodes import insert_episodes
from agentd.store.sqlite.migrations import migrate
from agentd.store.writes import InsertEpisodes
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_episode, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

DAY = 86400.0


class SwitchableEmbedder:
    """A hash embedder that can be taken down (as if its server were unreachable) and counts calls."""

    def __init__(self, dim: int = 256, ident: str | None = None):
        self.inner = HashEmbedder(dim)
        self.id = ident or self.inner.id
        self.down = False
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.down:
            raise ProviderError("connection refused", provider="emb", model="e", unreachable=True)
        return await self.inner.embed(texts)


def agent_yaml(strategy: str = "{kind: episodic}") -> str:
    return f"purpose: P\nmodel: main/m\nmemory: {{strategy: {strategy}}}\n"


async def episodic(
    harness: Harness, strategy: str = "{kind: episodic}", embedder: Any = "hash"
) -> tuple[Agent, ScriptedProvider]:
    main = ScriptedProvider("main")
    chosen = HashEmbedder(256) if embedder == "hash" else embedder
    agent = await harness.agent(agent_yaml(strategy), providers={"main": main}, embedder=chosen)
    return agent, main


def strategy_of(agent: Agent) -> EpisodicMemory:
    strategy = agent.state.memory_of(agent.spec, "webhook:c1").strategy
    assert isinstance(strategy, EpisodicMemory)
    return strategy


async def episodes(agent: Agent) -> list[tuple[str, str, str | None, bool]]:
    await agent.drain(5)
    stored = await every_episode(agent)
    vectors = {
        (v.id, e.embedder)
        for e in stored
        if e.embedder is not None
        for v in await agent.state.store.read(Vectors(e.partition, e.embedder))
    }
    return [(e.partition, e.text, e.embedder, (e.id, e.embedder) in vectors) for e in stored]


def recalled_section(main: ScriptedProvider) -> str:
    """The recalled episodes the last prompt quoted (the material of their remembered block)."""
    system = main.requests[-1].system
    return material_of(system[system.index(HEADING) :]) if HEADING in system else ""


async def last_recall(agent: Agent, key: str) -> dict[str, Any]:
    thread = await agent.state.threads.get(key)
    info = await strategy_of(agent).inspect(agent.context, thread)
    return info["last_recall"]


FACTS = [
    "My sister Maria lives in Lisbon and works as a nurse.",
    "I am planning a trip to Japan next April to see the cherry blossoms.",
    "My car is a blue Volvo estate from 2012.",
    "The spare key for the shed is under the green flowerpot.",
]


async def test_recall_finds_the_right_earlier_exchange_and_shows_no_transcript(harness: Harness) -> None:
    agent, main = await episodic(harness, "{kind: episodic, neighbours: 0}")  # rank order, nothing around
    talk = say(agent, "webhook:c1", "u1")
    for fact in FACTS:
        await talk(fact)
    assert len(await episodes(agent)) == len(FACTS)  # one episode per exchange, stored after each run
    later = say(agent, "webhook:c2", "u1")  # another conversation of the same person
    await later("Which city does my sister Maria live in?")
    section = recalled_section(main)
    assert section.splitlines()[0].endswith("User: My sister Maria lives in Lisbon and works as a nurse.")
    assert "Assistant: default reply to: My sister Maria" in section  # the exchange, not just the question
    # episodic alone replays no transcript: the model sees the new message only
    assert [m.text for m in main.requests[-1].messages] == ["Which city does my sister Maria live in?"]
    recall = await last_recall(agent, "webhook:c2")
    top = recall["episodes"][0]
    assert "Lisbon" in top["text"] and top["score"] > recall["episodes"][1]["score"]
    assert top["cosine"] > 0.2 and top["keyword"] > 0.7 and recall["mode"] == "hybrid"
    await later("Where is the spare key for the shed?")
    assert "green flowerpot" in recalled_section(main).splitlines()[0]


async def test_two_people_in_one_conversation_never_see_each_others_episodes(harness: Harness) -> None:
    agent, main = await episodic(harness)
    alice = say(agent, "discord:guild:general", "alice")
    bob = say(agent, "discord:guild:general", "bob")
    await alice("My locker code is 4812, please keep it in mind.")
    await bob("My locker code is 9377, please keep it in mind.")
    await agent.drain(5)
    await bob("What is my locker code?")
    seen_by_bob = main.requests[-1].system
    assert "9377" in seen_by_bob and "4812" not in seen_by_bob
    await alice("What is my locker code?")
    seen_by_alice = main.requests[-1].system
    assert "4812" in seen_by_alice and "9377" not in seen_by_alice
    partitions = {row[0] for row in await episodes(agent)}
    assert partitions == {"user:alice", "user:bob"}


async def test_anonymous_callers_are_partitioned_per_conversation(harness: Harness) -> None:
    agent, main = await episodic(harness)
    await say(agent, "webhook:a", None)("The launch password is swordfish.")
    await agent.drain(5)
    await say(agent, "webhook:b", None)("What is the launch password?")
    assert "swordfish" not in main.requests[-1].system
    await say(agent, "webhook:a", None)("What is the launch password?")
    assert "swordfish" in recalled_section(main)
    assert {row[0] for row in await episodes(agent)} == {"conversation:webhook:a", "conversation:webhook:b"}


async def test_write_tool_offers_save_episode_and_stores_only_on_call(harness: Harness) -> None:
    agent, main = await episodic(harness, "{kind: episodic, write: tool}")
    talk = say(agent, "webhook:c1", "u1")
    await talk("Hello there, nice weather today.")
    assert "save_episode" in [t.name for t in main.requests[-1].tools]
    assert await episodes(agent) == []  # nothing stored on its own
    assert strategy_of(agent).settle_due(await agent.state.threads.get("webhook:c1")) is False
    main.call("save_episode", text="").reply("could not save")
    await talk("Remember this.")
    assert main.requests[-1].messages[-1].tool_results[0].is_error  # refused, the model reads why
    main.call("save_episode", text="Dana prefers window seats on long flights", importance=0.8).reply("saved")
    await talk("I always pick a window seat on long flights, note that.")
    assert main.requests[-1].messages[-1].tool_results[0].content.startswith("Saved to episodic memory")
    stored = await episodes(agent)
    assert stored == [("user:u1", "Dana prefers window seats on long flights", "hash/256", True)]
    await talk("Which seat do I like on flights?")
    assert "window seats" in recalled_section(main)
    audit = [(e["kind"], e["action"]) for e in await agent.audit_events(limit=1000)]
    assert ("memory", "save_episode") in audit


async def test_without_an_embedder_recall_is_by_keywords_the_log_says_so_and_episodes_are_kept(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    agent, main = await episodic(harness, embedder=None)
    talk = say(agent, "webhook:c1", "u1")
    caplog.set_level(logging.INFO, logger="agentd.engine.turn")
    await talk("My favourite tea is a smoky lapsang souchong.")
    await talk("The weather in Lisbon was warm all week.")
    reply = await talk("What is my favourite tea?")
    recalled = recalled_section(main)
    assert "lapsang souchong" in recalled  # found by its keywords (favourite, tea), no vectors
    assert (await last_recall(agent, "webhook:c1"))["mode"] == "keyword"
    await say(agent, "webhook:c2", "u2")("What is my favourite tea?")  # another person: nothing of u1's
    assert "lapsang" not in main.requests[-1].system
    notes = [r for r in caplog.records if NO_EMBEDDER in r.getMessage()]
    assert len(notes) == 4 and reply.run_id in notes[2].getMessage()  # once per run
    assert (await episodes(agent))[0] == (
        "user:u1",
        "User: My favourite tea is a smoky lapsang souchong.\nAssistant: default reply to: My favourite tea is a smoky lapsang souchong.",
        None,
        False,
    )
    # configure an embedder (and restart): the stored episodes are embedded on the next view, then recalled
    agent = await harness.restart(agent, embedder=HashEmbedder(256))
    await say(agent, "webhook:c1", "u1")("Which tea do I like best?")
    assert "lapsang souchong" in recalled_section(main)
    assert all(row[2] == "hash/256" and row[3] for row in await episodes(agent) if row[0] == "user:u1")


async def test_embedder_down_at_write_time_stores_the_episode_and_embeds_it_later(harness: Harness) -> None:
    embedder = SwitchableEmbedder(256)
    agent, main = await episodic(harness, embedder=embedder)
    talk = say(agent, "webhook:c1", "u1")
    embedder.down = True
    await talk("My passport expires in March 2027.")
    assert await episodes(agent) == [
        (
            "user:u1",
            "User: My passport expires in March 2027.\nAssistant: default reply to: My passport expires in March 2027.",
            None,
            False,
        )
    ]  # stored, unembedded: never lost
    # still down at recall time: degraded to keywords, and said so
    await talk("When does my passport expire?")
    assert "passport expires in March 2027" in recalled_section(main)
    assert (await last_recall(agent, "webhook:c1"))["mode"] == "keyword"
    await agent.drain(5)  # that exchange, too, is stored while the embedder is down
    assert [row[3] for row in await episodes(agent)] == [False, False]
    embedder.down = False
    await talk("Tell me when my passport expires.")
    recall = await last_recall(agent, "webhook:c1")
    fact = [e for e in recall["episodes"] if e["text"].startswith("User: My passport expires")]
    assert recall["mode"] == "hybrid" and fact
    assert fact[0]["cosine"] > 0.3  # found through its (late) vector too
    assert all(row[2] == "hash/256" and row[3] for row in await episodes(agent) if row[0] == "user:u1")


async def test_embedder_change_keeps_old_episodes_unsearched_and_recalls_new_ones(harness: Harness) -> None:
    agent, main = await episodic(harness, embedder=HashEmbedder(64))
    talk = say(agent, "webhook:c1", "u1")
    await talk("My bicycle is a red Bianchi road bike.")
    agent = await harness.restart(agent, embedder=HashEmbedder(128))
    talk = say(agent, "webhook:c1", "u1")
    await talk("What bicycle do I ride?")
    assert "Bianchi" not in main.requests[-1].system  # another embedder's episode: not searched
    await talk("My kayak is a yellow Prijon touring kayak.")
    await talk("Which kayak do I paddle?")
    assert "Prijon" in recalled_section(main) and "Bianchi" not in recalled_section(main)
    stored = await episodes(agent)
    assert stored[0][1].startswith("User: My bicycle") and stored[0][2] == "hash/64"  # never deleted
    assert {row[2] for row in stored[1:]} == {"hash/128"}
    counts = (await strategy_of(agent).inspect(agent.context, await agent.state.threads.get("webhook:c1")))[
        "episodes"
    ]
    assert counts["user:u1"]["embedded_other"] == 1 and counts["user:u1"]["total"] == len(stored)


async def test_a_dimension_change_under_the_same_embedder_id_is_skipped_not_crashed(harness: Harness) -> None:
    agent, main = await episodic(harness, embedder=SwitchableEmbedder(32, ident="remote/model"))
    talk = say(agent, "webhook:c1", "u1")
    await talk("My boat is called Seagull.")
    await talk("What is my boat called?")  # loads the 32-d index
    assert "Seagull" in recalled_section(main)
    agent = await harness.restart(agent, embedder=SwitchableEmbedder(48, ident="remote/model"))  # same id
    talk = say(agent, "webhook:c1", "u1")
    reply = await talk("What is my boat called again?")
    assert reply.error is None and "Seagull" not in main.requests[-1].system
    await talk("My boat's home port is Harwich.")
    await talk("What is my boat's home port?")
    assert "Harwich" in recalled_section(main) and "Seagull" not in recalled_section(main)


async def test_recency_an_old_exact_match_beats_a_new_vague_one_and_the_newer_wins_among_equals(
    harness: Harness,
) -> None:
    agent, _ = await episodic(harness, "{kind: episodic, half_life_days: 30}")
    strategy = strategy_of(agent)
    now = strategy.clock()
    talk = say(agent, "webhook:c1", "u1")
    strategy.clock = lambda: now - 365 * DAY
    await talk("The wifi password at the lake cabin is larch-77.")
    await talk("My favourite biscuit is the ginger snap.")
    await agent.drain(5)
    strategy.clock = lambda: now
    await talk("I might visit the lake cabin some day.")
    await talk("My favourite biscuit is the ginger snap.")
    await agent.drain(5)
    await talk("What is the wifi password at the lake cabin?")
    recall = (await last_recall(agent, "webhook:c1"))["episodes"]
    assert "larch-77" in recall[0]["text"]  # a year old, still first
    assert "some day" in recall[1]["text"] and recall[1]["created_at"] > recall[0]["created_at"]
    await talk("Which biscuit is my favourite?")
    recall = (await last_recall(agent, "webhook:c1"))["episodes"]
    same = [e for e in recall if "ginger snap" in e["text"] and e["text"].startswith("User: My favourite")]
    assert len(same) == 2 and same[0]["relevance"] == pytest.approx(same[1]["relevance"])
    assert same[0]["created_at"] == now and same[0]["score"] > same[1]["score"]  # recency decides


async def test_threshold_filters_weak_matches(harness: Harness) -> None:
    agent, _ = await episodic(harness)
    talk = say(agent, "webhook:c1", "u1")
    await talk("My dentist appointment is on Friday at 3pm with Dr Okafor.")
    await talk("The garden fence needs painting before summer.")
    await agent.drain(5)
    thread = await agent.state.threads.get("webhook:c1")

    async def recall(threshold: float, text: str) -> list[str]:
        spec = EpisodicStrategy(kind="episodic", threshold=threshold, neighbours=0)
        strategy = EpisodicMemory(spec, None, "probe")
        view = await strategy.view(agent.context, thread, TurnInput("webhook:c1", text, "u1"))
        return list(view.system_sections)

    assert await recall(0.0, "Is Friday good for a picnic?")  # a weak, one-word match
    assert await recall(0.6, "Is Friday good for a picnic?") == []
    strong = await recall(0.6, "When is my dentist appointment with Dr Okafor?")
    assert len(strong) == 1 and "Okafor" in strong[0] and "fence" not in strong[0]


async def test_restart_keeps_episodes_and_rebuilds_the_index_from_the_file(harness: Harness) -> None:
    agent, _ = await episodic(harness)
    talk = say(agent, "webhook:c1", "u1")
    for fact in FACTS:
        await talk(fact)
    before = await episodes(agent)
    agent = await harness.restart(agent)
    main = agent.state.resources.providers.resolve("main/m")[0]
    assert isinstance(main, ScriptedProvider)
    assert index_cache(agent.state.store).peek("user:u1", "hash/256") is None
    await say(agent, "webhook:c1", "u1")("What car do I drive?")
    assert "blue Volvo" in recalled_section(main)
    index = index_cache(agent.state.store).peek("user:u1", "hash/256")
    assert index is not None and index.size == len(FACTS)
    # the cursor survived too: only the new exchange is added, nothing twice
    after = await episodes(agent)
    assert after[: len(before)] == before and len(after) == len(before) + 1


async def test_settle_due_is_a_cursor_check_and_inspect_reports_counts(harness: Harness) -> None:
    agent, _ = await episodic(harness)
    strategy = strategy_of(agent)
    talk = say(agent, "webhook:c1", "u1")
    await talk("I keep bees in the back garden.")
    await agent.drain(5)
    thread = await agent.state.threads.get("webhook:c1")
    assert strategy.settle_due(thread) is False
    await talk("How many hives should a beginner keep?")
    await agent.drain(5)
    assert strategy.settle_due(thread) is False
    info = await strategy.inspect(agent.context, thread)
    assert info["episodes"] == {
        "user:u1": {"total": 2, "embedded_current": 2, "embedded_other": 0, "pending": 0}
    }
    assert info["last_recall"]["episodes"][0]["text"].startswith("User: I keep bees")
    assert {"score", "relevance", "cosine", "keyword"} <= set(info["last_recall"]["episodes"][0])


async def test_an_empty_partition_costs_no_embedding(harness: Harness) -> None:
    embedder = SwitchableEmbedder(256)
    agent, main = await episodic(harness, "{kind: episodic, write: tool}", embedder=embedder)
    await say(agent, "webhook:c1", "u1")("Hello!")
    assert embedder.calls == 0 and "Relevant earlier" not in main.requests[-1].system


# -- the vector index ----------------------------------------------------------------------


def rows(vectors: np.ndarray, start: int = 1) -> list[IndexedVector]:
    return [IndexedVector(start + i, 0.0, 1.0, as_blob(v)) for i, v in enumerate(vectors)]


def test_index_search_is_exact_against_brute_force() -> None:
    rng = np.random.default_rng(7)
    data = rng.normal(size=(1000, 32)).astype(np.float32)
    index = VectorIndex.build(rows(data[:600]))
    index.add(rows(data[600:], start=601))  # appended in a second block (the matrix grows)
    query = rng.normal(size=32)
    expected = (data / np.linalg.norm(data, axis=1, keepdims=True)) @ (query / np.linalg.norm(query))
    best = np.argsort(-expected)[:10] + 1
    found = index.search(query, 10)
    assert [i for i, _ in found] == best.tolist()
    assert [c for _, c in found] == pytest.approx(np.sort(expected)[::-1][:10].tolist(), abs=1e-5)
    assert index.add(rows(data[:5])) == 0  # ids already indexed are not added twice


def test_index_skips_vectors_of_another_dimension() -> None:
    index = VectorIndex.build(rows(np.ones((3, 8), np.float32)))
    assert index.add([IndexedVector(99, 0.0, 1.0, as_blob([1.0] * 12))]) == 0
    assert index.size == 3 and index.skipped == 1 and 99 not in index
    assert index.search([1.0] * 12, 5) == []  # a query of another dimension finds nothing, no error
    mixed = VectorIndex.build(
        [*rows(np.ones((3, 8), np.float32)), IndexedVector(50, 0, 1, as_blob([1.0] * 4))]
    )
    assert mixed.dim == 8 and mixed.size == 3  # the dimension most rows have


async def test_index_cache_keeps_appends_that_race_a_load() -> None:
    cache = IndexCache()
    release = asyncio.Event()

    async def loader() -> list[IndexedVector]:
        await release.wait()
        return rows(np.eye(4, dtype=np.float32)[:2])  # read before episode 3 was committed

    loading = asyncio.create_task(cache.get("p", "e", loader))
    await asyncio.sleep(0)
    cache.append("p", "e", rows(np.eye(4, dtype=np.float32)[2:3], start=3))  # committed meanwhile
    release.set()
    index = await loading
    assert index.size == 3 and 3 in index
    assert await cache.get("p", "e", loader) is index  # loaded once


# -- keyword search in the store -------------------------------------------------------------


def test_keyword_search_stays_in_its_partition_and_embedder_and_takes_any_text() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    blob = as_blob([1.0, 0.0])
    insert_episodes(
        conn,
        InsertEpisodes(
            [
                NewEpisode("user:a", "k", "Alice moved to Lisbon", 1.0, embedder="hash/2", vector=blob),
                NewEpisode("user:a", "k", "Alice moved to Porto", 2.0, embedder="old/2", vector=blob),
                NewEpisode("user:a", "k", "Alice is moving to Faro", 3.0),  # not embedded yet
                NewEpisode("user:b", "k", "Alice moved to Lisbon too", 4.0, embedder="hash/2", vector=blob),
            ]
        ),
    )
    terms = keyword_terms("Where did Alice move?")
    assert terms == ["alice", "move"] and fts_match(terms) == '"alice" OR "move"'
    found = keyword_search(conn, KeywordSearch("user:a", "hash/2", terms, 10))
    assert sorted(h.text for h in found) == ["Alice is moving to Faro", "Alice moved to Lisbon"]
    assert {h.embedded for h in found} == {True, False}
    assert len(keyword_search(conn, KeywordSearch("user:a", None, terms, 10))) == 3  # every embedder
    # user text never becomes FTS syntax
    hostile = keyword_terms('Alice" OR "x" NEAR(a b) AND * ( ) ^ -col: "')
    assert hostile and keyword_search(conn, KeywordSearch("user:a", "hash/2", hostile, 10))
    assert keyword_terms("what is it?") == []  # nothing topical to search for


def test_keyword_search_finds_a_small_partitions_matches_behind_a_big_one() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    crowd = [NewEpisode("user:big", "k", f"otter otter otter note {i}", float(i)) for i in range(40)]
    insert_episodes(
        conn,
        InsertEpisodes(
            [*crowd, NewEpisode("user:small", "k", "a long note that mentions an otter once", 99.0)]
        ),
    )
    terms = keyword_terms("otter")
    # the table's best matches are all the big partition's; the small one's still comes back
    assert [h.text for h in keyword_search(conn, KeywordSearch("user:small", None, terms, 2))] == [
        "a long note that mentions an otter once"
    ]
    big = keyword_search(conn, KeywordSearch("user:big", None, terms, 5))
    assert len(big) == 5 and [h.bm25 for h in big] == sorted(h.bm25 for h in big)


def test_an_exchange_is_the_persons_message_and_the_final_answer_of_its_turn() -> None:
    call = ToolCallPart(id="c1", name="lookup", arguments={"q": "x"})
    result = ToolResultPart(call_id="c1", name="lookup", content="raw tool output")
    messages = [
        Message.user("Look up the tide times", "u1"),
        Message(role="assistant", parts=(call,)),
        Message(role="tool", parts=(result,)),
        Message.assistant("High tide is at 14:02."),
        Message.user("And tomorrow?", "u2"),  # a turn whose model call failed: no answer
    ]
    stored = [StoredMessage(i + 1, m, f"run{i}") for i, m in enumerate(messages)]
    found = exchanges_of(stored)
    assert [(e.user_id, e.text, e.run_id) for e in found] == [
        ("u1", "User: Look up the tide times\nAssistant: High tide is at 14:02.", "run0"),
        ("u2", "User: And tomorrow?", "run4"),
    ]
