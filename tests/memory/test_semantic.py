"""Semantic memory: facts extracted after each run, upserted by key per speaker, shown every turn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentd.engine.agent import Agent
from agentd.memory.base import TurnInput
from agentd.memory.patches import AnswerRefused, PatchRefused
from agentd.memory.semantic import SemanticMemory, parse_facts
from agentd.store.base import write_one
from agentd.store.queries import AuditEvents, Facts
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.writes import DeleteFact, UpsertFact
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_fact, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

GROUP = "webhook:group"


def agent_yaml(model: str | None = "extract/m", agent_model: str = "main/m") -> str:
    strategy: dict[str, Any] = {"kind": "semantic", "extractor": "EXTRACTOR PROMPT: keep durable facts."}
    if model:
        strategy["model"] = model
    return f"purpose: PURPOSE\nmodel: {agent_model}\nmemory: {json.dumps({'strategy': strategy})}\n"


def facts(*items: tuple[str, Any, float]) -> str:
    return json.dumps(
        {"facts": [{"key": k, "value": v, "confidence": c, "source": "they said so"} for k, v, c in items]}
    )


async def setup(harness: Harness, **kwargs: Any) -> tuple[Agent, ScriptedProvider, ScriptedProvider]:
    main, extract = ScriptedProvider("main"), ScriptedProvider("extract")
    agent = await harness.agent(agent_yaml(**kwargs), providers={"main": main, "extract": extract})
    return agent, main, extract


async def turn(agent: Agent, text: str, user: str | None = "u1", key: str = GROUP) -> None:
    await say(agent, key, user)(text)
    assert await agent.drain(5)  # extraction runs after the reply, before the next message


async def stored(agent: Agent) -> list[tuple[str, str, str, float, float, float]]:
    return [
        (f.partition, f.key, f.value, f.confidence, f.created_at, f.updated_at)
        for f in await every_fact(agent)
    ]


async def extraction_runs(agent: Agent, *fields: str) -> list[tuple[Any, ...]]:
    runs = await agent.runs(limit=1000)
    return [tuple(r[f] for f in fields) for r in runs if r["trigger"] == "extraction"]


async def extraction_audit(agent: Agent) -> list[tuple[str, dict[str, Any]]]:
    rows = await agent.state.store.read(AuditEvents(kind="extraction"))
    return [(r["action"], r["data"]) for r in rows]


def prompt(request: Any) -> str:
    assert len(request.messages) == 1
    return str(request.messages[0].text)


# -- the output contract and the SQL ---------------------------------------------------------


def test_parse_facts_contract() -> None:
    parsed = parse_facts(
        '```json\n{"facts": [{"key": "Preferred Editor", "value": "vim", "confidence": 0.9,'
        ' "source": "I use vim"}, {"key": "team", "value": 7, "confidence": 1},'
        ' {"key": "preferred_editor", "value": "helix", "confidence": 0.8, "source": ""},'
        ' {"key": "city", "value": null, "confidence": 0.7}]}\n```'
    )
    assert [(f.key, f.value, f.confidence, f.source) for f in parsed] == [
        ("team", "7", 1.0, None),
        ("preferred_editor", "helix", 0.8, None),  # the last occurrence of a key wins
        ("city", None, 0.7, None),  # null retracts
    ]
    assert parse_facts('{"facts": []}') == []
    bad = [
        ("no json here", "not valid JSON"),
        ('[{"key": "a"}]', '"facts"'),
        ('{"facts": [], "note": "x"}', '"facts"'),
        ('{"facts": ["vim"]}', "not an object"),
        ('{"facts": [{"key": "a b!", "value": "x", "confidence": 1}]}', "snake_case"),
        ('{"facts": [{"key": "a", "confidence": 1}]}', "no value"),
        ('{"facts": [{"key": "a", "value": ["x"], "confidence": 1}]}', "non-empty text"),
        ('{"facts": [{"key": "a", "value": "x", "confidence": 1.5}]}', "from 0 to 1"),
        ('{"facts": [{"key": "a", "value": "x"}]}', "from 0 to 1"),
        ('{"facts": [{"key": "a", "value": "x", "confidence": 1, "why": "?"}]}', "unknown field"),
        (json.dumps({"facts": [{"key": "a", "value": "x" * 501, "confidence": 1}]}), "over 500"),
        (json.dumps({"facts": [{"key": f"k{i}", "value": "x", "confidence": 1} for i in range(21)]}), "21"),
    ]
    for answer, reason in bad:
        with pytest.raises(AnswerRefused, match=reason) as refused:
            parse_facts(answer)
        assert not isinstance(refused.value, PatchRefused)  # facts are no patch of Σ


async def test_facts_upsert_newer_wins_and_keeps_created_at(tmp_path: Any) -> None:
    executor = StoreExecutor()
    store = SqliteStore(tmp_path / "a.sqlite", executor)
    await store.open()

    async def upsert(partition: str, key: str, value: str, *rest: Any) -> str:
        outcome = await write_one(store, UpsertFact(partition, key, value, *rest))
        return str(outcome)

    try:
        assert await upsert("user:a", "editor", "vim", 0.9, "s1", "r1", 100.0) == "created"
        assert await upsert("user:a", "editor", "emacs", 0.8, "s2", "r2", 200.0) == "updated"
        assert await upsert("user:a", "editor", "nano", 0.5, "s0", "r0", 150.0) == "kept"  # a late writer
        assert await upsert("user:b", "editor", "ed", 1.0, None, None, 120.0) == "created"
        [fact] = await store.read(Facts("user:a"))
        assert (fact.value, fact.confidence, fact.source, fact.run_id) == ("emacs", 0.8, "s2", "r2")
        assert (fact.created_at, fact.updated_at) == (100.0, 200.0)
        await upsert("user:a", "city", "Lyon", 1.0, None, None, 300.0)
        assert [f.key for f in await store.read(Facts("user:a"))] == ["city", "editor"]  # newest first
        assert [f.key for f in await store.read(Facts("user:a", limit=1))] == ["city"]
        assert await store.write(DeleteFact("user:a", "city"), DeleteFact("user:a", "city")) == [True, False]
        assert [f.value for f in await store.read(Facts("user:b"))] == ["ed"]
    finally:
        await store.close()
        executor.shutdown()


# -- extraction after each run ----------------------------------------------------------------


async def test_facts_are_extracted_after_a_run_and_shown_on_the_next_turn(harness: Harness) -> None:
    agent, main, extract = await setup(harness)
    main.reply("nice")
    extract.reply(facts(("editor", "vim", 0.9)))
    await turn(agent, "I always use vim")

    request = extract.requests[0]
    assert request.purpose == "extraction"
    assert request.system.startswith("EXTRACTOR PROMPT: keep durable facts.")
    assert '{"facts": [' in request.system  # the output contract
    assert prompt(request).endswith("The exchange:\nuser (u1): I always use vim\nassistant: nice")
    assert "(none yet)" in prompt(request)

    main.reply("sure")
    extract.reply(facts())
    await turn(agent, "what do I use?")
    chat = main.requests[1]
    assert chat.system.startswith("PURPOSE")
    assert "- editor: vim (confidence 0.9)" in chat.system
    assert [m.text for m in chat.messages] == ["what do I use?"]  # facts, not the transcript
    # the extractor is told what is known, so it updates keys instead of duplicating them
    assert "- editor: vim" in prompt(extract.requests[1])
    assert "I always use vim" not in prompt(extract.requests[1])  # only the new exchange

    runs = await extraction_runs(agent, "status", "model")
    assert runs == [("ok", "extract/m"), ("ok", "extract/m")]
    audit = await extraction_audit(agent)
    assert audit[0] == (
        "ok",
        {"partition": "user:u1", "upto_seq": 2, "written": ["editor"], "retracted": []},
    )
    report = await strategy_of(agent).inspect(agent.context, await agent.state.threads.get(GROUP))
    assert [f["value"] for f in report["facts"]["user:u1"]] == ["vim"]
    assert report["not_extracted"] == 0


async def test_upsert_by_key_newer_wins_no_duplicates_and_null_retracts(harness: Harness) -> None:
    agent, _main, extract = await setup(harness)
    extract.reply(facts(("editor", "vim", 0.9), ("city", "Lyon", 0.8)))
    await turn(agent, "vim user from Lyon")
    [city_before, editor_before] = await stored(agent)
    extract.reply(facts(("editor", "emacs", 0.7)))
    await turn(agent, "I switched to emacs")
    rows = await stored(agent)
    assert [(p, k, v, c) for p, k, v, c, _, _ in rows] == [
        ("user:u1", "city", "Lyon", 0.8),
        ("user:u1", "editor", "emacs", 0.7),
    ]
    editor = rows[1]
    assert editor[4] == editor_before[4]  # created_at kept
    assert editor[5] > editor_before[5]  # updated_at set
    assert rows[0] == city_before  # untouched

    extract.reply(facts(("city", None, 0.9)))
    await turn(agent, "I moved away from Lyon")
    assert [k for _, k, *_ in await stored(agent)] == ["editor"]
    assert (await extraction_audit(agent))[-1][1]["retracted"] == ["city"]


async def test_one_person_never_sees_another_persons_facts(harness: Harness) -> None:
    agent, main, extract = await setup(harness)
    extract.reply(facts(("editor", "vim", 0.9)))
    await turn(agent, "I use vim", user="alice")
    extract.reply(facts(("editor", "emacs", 0.9)))
    await turn(agent, "I use emacs", user="bob")
    # bob's exchange was extracted without alice's facts, into bob's partition
    assert "vim" not in prompt(extract.requests[1])
    assert [(p, v) for p, _, v, *_ in await stored(agent)] == [("user:alice", "vim"), ("user:bob", "emacs")]

    extract.reply(facts())
    await turn(agent, "what do I use?", user="bob")
    assert "- editor: emacs" in main.requests[-1].system and "vim" not in main.requests[-1].system
    extract.reply(facts())
    await turn(agent, "and me?", user="alice")
    assert "- editor: vim" in main.requests[-1].system and "emacs" not in main.requests[-1].system
    # a person's facts follow them to another conversation; an anonymous caller sees nobody's
    extract.reply(facts())
    await turn(agent, "hi from a DM", user="alice", key="webhook:alice-dm")
    assert "- editor: vim" in main.requests[-1].system
    extract.reply(facts())
    await turn(agent, "who am I?", user=None, key="webhook:anon")
    assert "editor" not in main.requests[-1].system

    report = await strategy_of(agent).inspect(agent.context, await agent.state.threads.get(GROUP))
    assert set(report["facts"]) == {"user:alice", "user:bob"}


async def test_a_backlog_of_several_speakers_is_extracted_per_speaker(harness: Harness) -> None:
    agent, _main, extract = await setup(harness)
    extract.fail("down", status=None, unreachable=True)
    await turn(agent, "I use vim", user="alice")
    extract.fail("down", status=None, unreachable=True)  # the settle before bob's turn
    extract.reply(facts(("editor", "vim", 0.9))).reply(facts(("editor", "emacs", 0.9)))
    await turn(agent, "I use emacs", user="bob")
    assert "I use vim" in prompt(extract.requests[2]) and "emacs" not in prompt(extract.requests[2])
    assert "I use emacs" in prompt(extract.requests[3]) and "vim" not in prompt(extract.requests[3])
    assert [(p, v) for p, _, v, *_ in await stored(agent)] == [("user:alice", "vim"), ("user:bob", "emacs")]


async def test_a_failure_inside_a_backlog_keeps_the_cursor_before_it(harness: Harness) -> None:
    agent, _main, extract = await setup(harness)
    down = {"status": None, "unreachable": True}
    extract.fail("down", **down)
    await turn(agent, "I use vim", user="alice")
    # alice's exchange fails before and after bob's turn: bob's, after it, must wait its turn
    extract.fail("down", **down).fail("down", **down)
    await turn(agent, "I use emacs", user="bob")
    assert len(extract.requests) == 3 and await stored(agent) == []
    agent = await harness.restart(agent)  # the cursor is in the file: both are still due
    extract.reply(facts(("editor", "vim", 0.9))).reply(facts(("editor", "emacs", 0.9))).reply(facts())
    await turn(agent, "hello", user="bob")
    assert "I use vim" in prompt(extract.requests[3]) and "emacs" not in prompt(extract.requests[3])
    assert "I use emacs" in prompt(extract.requests[4]) and "vim" not in prompt(extract.requests[4])
    assert [(p, v) for p, _, v, *_ in await stored(agent)] == [("user:alice", "vim"), ("user:bob", "emacs")]


async def test_bad_output_is_audited_and_the_cursor_moves_on(harness: Harness) -> None:
    agent, _main, extract = await setup(harness)
    extract.reply("The person uses vim.")
    await turn(agent, "I use vim")
    assert await stored(agent) == []
    [(action, data)] = await extraction_audit(agent)
    assert action == "refused" and "not valid JSON" in data["reason"]
    runs = await extraction_runs(agent, "status", "error")
    assert runs[0][0] == "error" and "not valid JSON" in runs[0][1]

    extract.reply(facts(("city", "Lyon", 1)))
    await turn(agent, "I live in Lyon")
    assert "I use vim" not in prompt(extract.requests[1])  # the refused exchange is not retried
    assert [k for _, k, *_ in await stored(agent)] == ["city"]


async def test_provider_down_keeps_the_cursor(harness: Harness) -> None:
    agent, _main, extract = await setup(harness)
    extract.fail("cannot connect", status=None, unreachable=True)
    await turn(agent, "I use vim")
    assert await stored(agent) == []
    assert [a for a, _ in await extraction_audit(agent)] == ["deferred"]
    report = await strategy_of(agent).inspect(agent.context, await agent.state.threads.get(GROUP))
    assert report["not_extracted"] == 2

    # back before the next turn: the kept exchange is extracted then, the new one after the run
    extract.reply(facts(("editor", "vim", 0.9))).reply(facts(("city", "Lyon", 1)))
    await turn(agent, "I live in Lyon")
    assert "I use vim" in prompt(extract.requests[1])
    assert "I live in Lyon" in prompt(extract.requests[2])
    assert [k for _, k, *_ in await stored(agent)] == ["city", "editor"]


async def test_without_a_model_nothing_is_extracted_and_the_view_says_so(harness: Harness) -> None:
    agent, _main, extract = await setup(harness, model=None, agent_model="offline")
    await turn(agent, "I use vim")
    assert extract.requests == [] and await stored(agent) == []
    strategy = strategy_of(agent)
    assert isinstance(strategy, SemanticMemory)
    view = await strategy.view(
        agent.context, await agent.state.threads.get(GROUP), TurnInput(GROUP, "hi", "u1")
    )
    assert any("no model to extract facts" in note for note in view.notes)
