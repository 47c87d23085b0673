"""State memory: Σ folded once per run into patches of changed keys, and every fault of product.md §5."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentd.config.models import DaemonSpec
from agentd.engine.agent import Agent
from agentd.errors import CredentialError, ProviderError
from agentd.memory.base import TurnInput
from agentd.memory.patches import (
    AnswerRefused,
    PatchRefused,
    apply_patch,
    check_size,
    fold_answer,
    parse_json_answer,
    rejected_request,
    validate_patch,
)
from agentd.memory.state import StateMemory
from agentd.providers.remembered import material_of
from agentd.store.queries import AuditEvents
from testkit.scripted import ScriptedProvider
from tests.support import Harness, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

FIELDS = ["goal", "working_on", "open"]
KEY = "webhook:c1"


def agent_yaml(
    *,
    model: str | None = "fold/m",
    agent_model: str = "main/m",
    max_chars: int = 4000,
    tail: int = 8,
    persistent: bool = False,
) -> str:
    strategy = {
        "kind": "state",
        "spec": "Keep what this person is working on and what is still open.",
        "fields": [
            {"name": "goal", "description": "what they are trying to achieve"},
            {"name": "working_on", "description": "the ids in play right now"},
            {"name": "open", "description": "what is still unresolved"},
        ],
        "max_chars": max_chars,
        "tail_messages": tail,
    }
    if model:
        strategy["model"] = model
    memory = {"strategy": strategy, "persistent": persistent}
    return f"purpose: PURPOSE LINE\nmodel: {agent_model}\nmemory: {json.dumps(memory)}\n"


async def setup(
    harness: Harness, name: str = "bot", **kwargs: Any
) -> tuple[Agent, ScriptedProvider, ScriptedProvider]:
    main, fold = ScriptedProvider("main"), ScriptedProvider("fold")
    agent = await harness.agent(agent_yaml(**kwargs), name, providers={"main": main, "fold": fold})
    return agent, main, fold


async def turn(agent: Agent, text: str, user: str = "u1") -> str:
    reply = await say(agent, KEY, user)(text)
    assert await agent.drain(5)  # the fold runs after the reply, before the next message
    return reply.text


async def inspect(agent: Agent) -> dict[str, Any]:
    thread = await agent.state.threads.get(KEY)
    return await strategy_of(agent).inspect(agent.context, thread)


async def fold_runs(agent: Agent) -> list[tuple[str, str, str | None]]:
    runs = await agent.runs(limit=1000)  # (oldest first: by started_at, then as written)
    return [(r["status"], r["model"], r["parent_run_id"]) for r in runs if r["trigger"] == "fold"]


async def fold_audit(agent: Agent) -> list[tuple[str, dict[str, Any]]]:
    rows = await agent.state.store.read(AuditEvents(kind="fold"))
    return [(r["action"], r["data"]) for r in rows]


def texts(request: Any) -> list[str]:
    return [m.text for m in request.messages]


# -- the pure patch functions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "patch"),
    [
        ('```json\n{"goal": "x"}\n```', {"goal": "x"}),
        ('Here it is:\n```\n{"goal": "x"}\n```\nDone.', {"goal": "x"}),
        ('  {"open": null} ', {"open": None}),
    ],
    ids=["fenced", "fenced-inside-prose", "bare-with-null"],
)
def test_a_json_answer_is_read_fenced_or_bare(answer: str, patch: dict[str, Any]) -> None:
    assert parse_json_answer(answer) == patch


def test_prose_is_not_a_patch() -> None:
    with pytest.raises(AnswerRefused, match="not valid JSON"):
        parse_json_answer("sure, the goal is x")


def test_an_empty_fence_is_refused() -> None:
    with pytest.raises(AnswerRefused, match="empty"):
        parse_json_answer("```json\n```")


def test_a_patch_must_be_an_object() -> None:
    with pytest.raises(PatchRefused, match="not a JSON array"):
        validate_patch([{"goal": "x"}], FIELDS)


def test_an_unknown_key_is_refused_naming_the_declared_fields() -> None:
    with pytest.raises(PatchRefused, match=r"unknown key 'mood'.*goal, working_on, open"):
        validate_patch({"goal": "x", "mood": "y"}, FIELDS)


def test_applying_a_patch_keeps_field_order_and_drops_undeclared_keys() -> None:
    result = apply_patch({"open": "a", "goal": "g", "gone": 1}, {"working_on": [1]}, FIELDS)
    assert list(result.sigma) == ["goal", "working_on", "open"]
    assert "gone" not in result.sigma


def test_resending_an_unchanged_value_is_not_a_change() -> None:
    result = apply_patch({"goal": "g"}, {"goal": "g", "working_on": [1]}, FIELDS)
    assert result.changed == ("working_on",)


def test_null_deletes_and_undeclared_keys_count_as_deleted() -> None:
    result = apply_patch({"open": "a", "goal": "g", "gone": 1}, {"open": None}, FIELDS)
    assert result.sigma == {"goal": "g"}
    assert result.deleted == ("open", "gone")


def test_size_is_the_length_of_compact_json() -> None:
    assert check_size({"goal": "x" * 10}, 100) == len('{"goal":"xxxxxxxxxx"}')


def test_a_sigma_over_the_limit_is_refused() -> None:
    with pytest.raises(PatchRefused, match="over the limit of 100"):
        check_size({"goal": "x" * 100}, 100)


def test_a_fold_answer_that_would_grow_sigma_over_the_limit_is_refused() -> None:
    with pytest.raises(PatchRefused, match="over the limit of 150"):
        fold_answer('{"goal": "' + "é" * 200 + '"}', {}, FIELDS, 150)


@pytest.mark.parametrize(
    ("error", "rejected"),
    [
        (ProviderError("x", provider="p", model="m", status=None, unreachable=True), False),
        (ProviderError("x", provider="p", model="m", status=503, retryable=True), False),
        (CredentialError(provider="p", model="m", key_env="P_API_KEY"), False),
        (ProviderError("x", provider="p", model="m", status=400), True),
    ],
    ids=["unreachable", "503-after-retries", "no-key", "400"],
)
def test_only_a_request_the_provider_refused_drops_the_queue(error: Exception, rejected: bool) -> None:
    assert rejected_request(error) is rejected


# -- the fold and what the model sees -------------------------------------------------------


async def test_the_model_sees_spec_sigma_and_the_last_exchange_never_the_transcript(
    harness: Harness,
) -> None:
    agent, main, fold = await setup(harness)
    main.reply("noted")
    fold.reply('{"goal": "ship v2"}')
    await turn(agent, "I want to ship v2")

    request = fold.requests[0]
    assert request.purpose == "fold"
    assert "Keep what this person is working on" in request.system
    assert "- working_on: the ids in play right now" in request.system
    assert texts(request) == [
        "Σ now:\n{}\n\nMessages since Σ was last updated:\nuser (u1): I want to ship v2\nassistant: noted"
    ]

    main.reply("on it")
    fold.reply('```json\n{"working_on": "PR 12"}\n```')  # a fenced answer is fine
    await turn(agent, "working on PR 12")
    chat = main.requests[1]
    assert chat.system.startswith("PURPOSE LINE")
    assert "Σ, as JSON:" in chat.system and material_of(chat.system) == '{"goal":"ship v2"}'
    assert texts(chat) == ["I want to ship v2", "noted", "working on PR 12"]
    assert texts(fold.requests[1])[0].startswith('Σ now:\n{"goal":"ship v2"}')
    assert "I want to ship v2" not in texts(fold.requests[1])[0]  # only what was not folded yet

    main.reply("fine")
    fold.reply("{}")  # nothing changed
    await turn(agent, "thanks")
    chat = main.requests[2]
    assert material_of(chat.system) == '{"goal":"ship v2","working_on":"PR 12"}'
    assert texts(chat) == ["working on PR 12", "on it", "thanks"]  # not the first exchange

    assert [status for status, _, _ in await fold_runs(agent)] == ["ok", "ok", "ok"]
    runs = await fold_runs(agent)
    assert all(model == "fold/m" and parent for _, model, parent in runs)  # linked to the message run
    audit = await fold_audit(agent)
    assert [a for a, _ in audit] == ["ok", "ok", "ok"]
    assert audit[1][1]["changed"] == ["working_on"]

    # Σ and the cursor are in the agent's file: a restart sees them
    agent = await harness.restart(agent)
    report = await inspect(agent)
    assert report["sigma"] == {"goal": "ship v2", "working_on": "PR 12"}
    assert report["not_folded"] == []
    assert [m["parts"][0]["text"] for m in report["messages"]] == ["thanks", "fine"]


async def test_null_deletes_a_key(harness: Harness) -> None:
    agent, _main, fold = await setup(harness)
    fold.reply('{"goal": "ship v2", "open": "the flaky test"}')
    await turn(agent, "goal is v2; flaky test open")
    fold.reply('{"open": null}')
    await turn(agent, "the flaky test is fixed")
    assert (await inspect(agent))["sigma"] == {"goal": "ship v2"}
    assert (await fold_audit(agent))[-1][1]["deleted"] == ["open"]


@pytest.mark.parametrize(
    ("bad_answer", "reason"),
    [
        ('{"goal": "ship v2", "mood": "happy"}', "unknown key 'mood'"),
        ('{"goal": "' + "x" * 300 + '"}', "over the limit of 200"),
        ("Sure! The goal is to ship v2.", "not valid JSON"),
        ('["goal", "ship v2"]', "must be a JSON object"),
    ],
    ids=["unknown-key", "oversize", "malformed-json", "not-an-object"],
)
async def test_a_refused_patch_is_retried_once_with_the_reason(
    harness: Harness, bad_answer: str, reason: str
) -> None:
    agent, _main, fold = await setup(harness, max_chars=200)
    fold.reply('{"open": "docs"}')
    await turn(agent, "docs are open")
    fold.reply(bad_answer).reply('{"goal": "ship v2"}')
    await turn(agent, "I want to ship v2")

    assert len(fold.requests) == 3
    retry = fold.requests[2]
    assert texts(retry)[:2] == [texts(fold.requests[1])[0], bad_answer]  # same input, its own answer
    assert reason in texts(retry)[2]
    # the whole first patch was refused: nothing of it reached Σ (no 'mood', 'goal' from the retry)
    assert (await inspect(agent))["sigma"] == {"goal": "ship v2", "open": "docs"}
    assert [s for s, _, _ in await fold_runs(agent)] == ["ok", "error", "ok"]
    audit = await fold_audit(agent)
    assert [a for a, _ in audit] == ["ok", "refused", "ok"]
    assert reason in audit[1][1]["reason"] and audit[1][1]["attempt"] == 1
    assert audit[2][1]["attempt"] == 2


async def test_refused_twice_keeps_sigma_and_drops_the_pending_messages(harness: Harness) -> None:
    agent, _main, fold = await setup(harness)
    fold.reply('{"goal": "ship v2"}')
    await turn(agent, "I want to ship v2")
    fold.reply('{"mood": "tired"}').reply('{"goal": "rest", "mood": "tired"}')
    await turn(agent, "I am tired")

    report = await inspect(agent)
    assert report["sigma"] == {"goal": "ship v2"}  # kept as it was
    assert report["not_folded"] == []  # the pending messages were dropped: the cursor moved on
    audit = await fold_audit(agent)
    assert [(a, d.get("attempt")) for a, d in audit] == [
        ("ok", 1),
        ("refused", 1),
        ("refused", 2),
        ("dropped", None),
    ]
    assert all("mood" in d["reason"] for a, d in audit if a == "refused")
    assert audit[-1][1]["messages"] == 2

    fold.reply('{"working_on": "PR 3"}')
    await turn(agent, "now PR 3")
    assert "I am tired" not in texts(fold.requests[-1])[0]  # dropped messages are not folded again
    assert "now PR 3" in texts(fold.requests[-1])[0]
    assert (await inspect(agent))["sigma"] == {"goal": "ship v2", "working_on": "PR 3"}


async def test_a_request_the_provider_rejects_counts_as_a_refusal(harness: Harness) -> None:
    agent, _main, fold = await setup(harness)
    fold.fail("HTTP 400 context too long", status=400).fail("HTTP 400 context too long", status=400)
    await turn(agent, "a very long message")
    report = await inspect(agent)
    assert report["not_folded"] == [] and report["sigma"] == {}
    assert [a for a, _ in await fold_audit(agent)] == ["refused", "refused", "dropped"]


async def test_provider_down_keeps_the_queue_and_the_next_turn_folds_it(harness: Harness) -> None:
    agent, main, fold = await setup(harness)
    main.reply("a1")
    fold.fail("cannot connect", status=None, unreachable=True)
    await turn(agent, "q1")
    assert [m["seq"] for m in (await inspect(agent))["not_folded"]] == [1, 2]  # the queue is kept
    agent = await harness.restart(agent)  # ... in the agent's file, not only in memory
    assert [m["seq"] for m in (await inspect(agent))["not_folded"]] == [1, 2]

    # still down before and after turn 2 (503 after retries counts as down too)
    main.reply("a2")
    fold.fail("cannot connect", status=None, unreachable=True).fail("HTTP 503", status=503)
    await turn(agent, "q2")
    # still down before turn 3: the chat model sees the queue verbatim, Σ is still empty
    main.reply("a3")
    fold.fail("cannot connect", status=None, unreachable=True).reply('{"goal": "answer q1-q3"}')
    await turn(agent, "q3")
    chat = main.requests[2]
    assert texts(chat) == ["q1", "a1", "q2", "a2", "q3"]
    assert "4 message(s) not folded into Σ yet" in chat.system

    # back up after turn 3: one fold takes in the whole queue
    folded = texts(fold.requests[-1])[0]
    assert all(t in folded for t in ("q1", "a1", "q2", "a2", "q3", "a3"))
    report = await inspect(agent)
    assert report["sigma"] == {"goal": "answer q1-q3"} and report["not_folded"] == []
    assert [s for s, _, _ in await fold_runs(agent)] == ["error"] * 4 + ["ok"]
    assert [a for a, _ in await fold_audit(agent)] == ["deferred"] * 4 + ["ok"]

    main.reply("a4")
    await turn(agent, "q4")
    assert texts(main.requests[3]) == ["q3", "a3", "q4"]


async def test_inspect_shows_sigma_above_the_messages_not_yet_folded(harness: Harness) -> None:
    agent, main, fold = await setup(harness)
    fold.reply('{"goal": "ship v2"}')
    await turn(agent, "I want to ship v2")
    main.reply("ok")
    fold.fail("down", status=None, unreachable=True)
    await turn(agent, "also fix the docs")
    report = await inspect(agent)
    assert list(report)[:4] == ["kind", "layer", "model", "degraded"]
    assert list(report).index("sigma") < list(report).index("not_folded")
    assert report["sigma"] == {"goal": "ship v2"}
    assert [m["parts"][0]["text"] for m in report["not_folded"]] == ["also fix the docs", "ok"]
    json.dumps(report)  # served as JSON by the inspector


async def test_one_fold_per_run_however_many_tool_steps(harness: Harness) -> None:
    agent, main, fold = await setup(harness, persistent=True)
    for i in range(3):
        main.call("remember", key=f"k{i}", value=f"v{i}")
    main.reply("saved three things")
    fold.reply('{"working_on": "k0 k1 k2"}')
    await turn(agent, "remember three things")
    assert len(main.requests) == 4  # three tool steps and the answer
    assert len(await fold_runs(agent)) == 1  # one extra call for the whole run
    folded = texts(fold.requests[0])[0]
    assert folded.count("assistant: -> remember(") == 3 and folded.count("tool: <- remember: Remembered") == 3

    main.reply("next")
    fold.reply("{}")
    await turn(agent, "and now?")
    # the last exchange is shown whole: tool calls with their results, in order
    roles = [m.role for m in main.requests[-1].messages]
    assert roles == ["user", *["assistant", "tool"] * 3, "assistant", "user"]


async def test_without_a_model_state_degrades_to_a_window_of_the_tail(harness: Harness) -> None:
    # the agent runs on the offline model and nothing else is configured: nothing can fold
    agent, _main, fold = await setup(harness, model=None, agent_model="offline", tail=2, persistent=True)
    for text in ("hello", "remember colour: blue", "how are you"):
        await turn(agent, text)
    assert fold.requests == [] and await fold_runs(agent) == []
    strategy = strategy_of(agent)
    assert isinstance(strategy, StateMemory)
    thread = await agent.state.threads.get(KEY)
    view = await strategy.view(agent.context, thread, TurnInput(KEY, "next", "u1"))
    assert len(thread.messages) == 8  # hello/reply, remember call+result+reply..., how are you/reply
    assert [m.role for m in view.messages] == ["user", "assistant"]  # the last 2
    assert any("no model to fold with" in n for n in view.notes)
    assert view.system_sections == []  # no Σ was ever kept

    # a tail that would start at a tool result starts at its call instead
    strategy2 = StateMemory(strategy.spec.model_copy(update={"tail_messages": 4}), None)
    view = await strategy2.view(agent.context, thread, TurnInput(KEY, "next", "u1"))
    assert [m.role for m in view.messages] == ["assistant", "tool", "assistant", "user", "assistant"]
    report = await strategy2.inspect(agent.context, thread)
    assert report["degraded"] is True and report["model"] is None


async def test_an_explicit_offline_fold_model_also_degrades(harness: Harness) -> None:
    agent, main, _fold = await setup(harness, model="offline", tail=2)
    await turn(agent, "one")
    await turn(agent, "two")
    assert await fold_runs(agent) == []
    assert texts(main.requests[-1]) == ["one", "default reply to: one", "two"]


async def test_fold_model_resolution_order(harness: Harness) -> None:
    providers = {name: ScriptedProvider(name) for name in ("main", "strat", "extractor")}

    async def agent_with(name: str, strategy_model: str | None, extractor: str | None) -> Agent:
        settings = DaemonSpec(memory_extractor_model=extractor)
        return await harness.agent(
            agent_yaml(model=strategy_model), name, providers=providers, settings=settings
        )

    # the strategy's model wins over agentd.yaml's memory_extractor_model and the agent's model
    first = await agent_with("first", "strat/m", "extractor/m")
    providers["strat"].reply('{"goal": "g"}')
    await turn(first, "hi")
    assert [r.purpose for r in providers["strat"].requests] == ["fold"]
    # without it, memory_extractor_model
    second = await agent_with("second", None, "extractor/m")
    providers["extractor"].reply('{"goal": "g"}')
    await turn(second, "hi")
    assert [r.purpose for r in providers["extractor"].requests] == ["fold"]
    # without either, the agent's own model
    third = await agent_with("third", None, None)
    providers["main"].reply("hello").reply('{"goal": "g"}')
    await turn(third, "hi")
    assert [r.purpose for r in providers["main"].requests] == ["chat", "chat", "chat", "fold"]
    for agent, model in ((first, "strat/m"), (second, "extractor/m"), (third, "main/m")):
        assert [(s, m) for s, m, _ in await fold_runs(agent)] == [("ok", model)]


async def test_reset_forgets_sigma_and_new_starts_a_fresh_one(harness: Harness) -> None:
    agent, main, fold = await setup(harness)
    fold.reply('{"goal": "ship v2"}')
    await turn(agent, "I want to ship v2")
    await turn(agent, "/reset")
    fold.reply('{"open": "docs"}')
    await turn(agent, "docs are open")
    assert texts(fold.requests[-1])[0].startswith("Σ now:\n{}")  # the old Σ is gone
    assert (await inspect(agent))["sigma"] == {"open": "docs"}

    await turn(agent, "/new")
    main.reply("hello again")
    fold.reply("{}")
    await turn(agent, "hi")
    assert "Σ = {} (nothing kept yet)" in main.requests[-1].system
    assert texts(main.requests[-1]) == ["hi"]
