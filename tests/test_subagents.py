"""Sub-agents: another agent as a tool, its memory scoped to (sub-agent, caller's conversation), runs linked."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.engine import subagents
from agentd.engine.agent import Agent
from agentd.providers.base import CompletionRequest
from testkit.scripted import ScriptedProvider
from tests.support import Harness, LocalPeers, every_message, say, strategy_of

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def caller_spec(*slots: str) -> str:
    return f"purpose: You coordinate.\nmodel: lead/m\nsubagents: [{', '.join(slots)}]\n"


HELPER = "purpose: You research things.\nmodel: helper/m\nmemory: {scope: thread}\n"


async def pair(
    harness: Harness, slot: str = "{agent: researcher}", helper: str = HELPER
) -> tuple[Agent, Agent, ScriptedProvider, ScriptedProvider]:
    lead, helper_model = ScriptedProvider("lead"), ScriptedProvider("helper")
    models, peers = {"lead": lead, "helper": helper_model}, LocalPeers()
    caller = await harness.agent(caller_spec(slot), "coordinator", models, peers=peers)
    sub = await harness.agent(helper, "researcher", models, peers=peers)
    peers.add(caller, sub)
    return caller, sub, lead, helper_model


def last_result(request: CompletionRequest) -> tuple[str, bool]:
    results = [p for m in request.messages for p in m.tool_results]
    return results[-1].content, results[-1].is_error


async def runs(agent: Agent) -> list[dict[str, Any]]:
    fields = ("id", "conversation_key", "trigger", "status", "parent_run_id")
    rows = [tuple(r[f] for f in fields) for r in await agent.runs(limit=1000)]
    return [dict(zip(("id", "key", "trigger", "status", "parent"), row, strict=True)) for row in rows]


async def test_a_call_runs_the_sub_agent_and_links_its_run(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(harness)
    lead.call("ask_researcher", task="find the capital of Peru").reply("It is Lima.")
    helper.reply("Lima")
    reply = await say(caller, "webhook:c1", "ana")("what is the capital of Peru?")
    assert reply.text == "It is Lima."
    spec = next(t for t in lead.requests[0].tools if t.name == "ask_researcher")
    assert spec.parameters["required"] == ["task"] and "You research things." in spec.description
    # the sub-agent got the task as a message from the same person, in its own conversation
    asked = helper.requests[0]
    assert asked.system.startswith("You research things.")
    assert [(m.text, m.user_id) for m in asked.messages] == [("find the capital of Peru", "ana")]
    assert last_result(lead.requests[-1]) == ("Lima", False)
    # a run in the sub-agent's file, linked to the caller's run
    (parent,) = await runs(caller)
    (child,) = await runs(sub)
    assert child == {
        "id": child["id"],
        "key": "agent:coordinator:webhook:c1",
        "trigger": "message",
        "status": "ok",
        "parent": parent["id"],
    }
    assert parent["key"] == "webhook:c1" and parent["parent"] is None
    stored = [(m["role"], m["user_id"]) for m in await every_message(sub)]
    assert stored == [("user", "ana"), ("assistant", None)]


async def test_memory_is_per_sub_agent_and_caller_conversation(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(harness)
    for key, task in (("webhook:c1", "first task"), ("webhook:c1", "second task"), ("webhook:c2", "other")):
        lead.call("ask_researcher", task=task).reply("done")
        helper.reply(f"answer to {task}")
        await say(caller, key)("go")
    second, other = helper.requests[1], helper.requests[2]
    assert [m.text for m in second.messages] == ["first task", "answer to first task", "second task"]
    assert [m.text for m in other.messages] == ["other"]  # another conversation of the caller
    # the sub-agent's own conversations are untouched by the calls
    helper.reply("direct")
    await say(sub, "webhook:c1")("hello directly")
    assert [m.text for m in helper.requests[-1].messages] == ["hello directly"]


async def test_memory_override_replaces_the_sub_agents_strategy_for_that_slot(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(
        harness, "{agent: researcher, memory_override: {kind: window, messages: 2}}"
    )
    for i in range(3):
        lead.call("ask_researcher", task=f"task {i}").reply("ok")
        helper.reply(f"answer {i}")
        await say(caller, "webhook:c1")("go")
    # the override's window of 2, not the sub-agent's own full transcript
    assert [m.text for m in helper.requests[-1].messages] == ["task 1", "answer 1", "task 2"]
    assert strategy_of(sub).kind == "full"  # its own definition is unchanged
    # what the inspector and the status report for that conversation is the override, as the model got it
    key = subagents.subagent_key("coordinator", "webhook:c1")
    inspected = await sub.inspect(key)
    assert inspected["strategy"] == "window" and inspected["layers"][0]["kind"] == "window"
    assert [m["parts"][0]["text"] for m in inspected["layers"][0]["messages"]] == ["task 2", "answer 2"]
    assert (await sub.status_of(key))["memory"]["strategy"] == "window"
    prompt = await sub.next_prompt(key)
    assert prompt["strategy"] == "window" and len(prompt["messages"]) == 2
    # the sub-agent's own conversations still get its own strategy
    assert (await sub.inspect("webhook:c1"))["strategy"] == "full"


async def test_an_override_of_none_keeps_no_transcript(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(harness, "{agent: researcher, memory_override: {kind: none}}")
    for i in range(2):
        lead.call("ask_researcher", task=f"task {i}").reply("ok")
        await say(caller, "webhook:c1")("go")
    assert [m.text for m in helper.requests[-1].messages] == ["task 1"]
    assert await every_message(sub) == []
    assert [r["parent"] is not None for r in await runs(sub)] == [True, True]


async def test_unknown_or_stopped_agents_are_tool_errors(harness: Harness) -> None:
    lead, peers = ScriptedProvider("lead"), LocalPeers()
    caller = await harness.agent(
        caller_spec("{agent: ghost}", "{agent: code-review, description: Reviews a diff.}"),
        "coordinator",
        {"lead": lead},
        peers=peers,
    )
    reviewer = await harness.agent("model: lead/m\n", "code-review", {"lead": lead}, peers=peers)
    peers.add(caller, reviewer)
    await reviewer.close()  # stopped
    lead.call("ask_ghost", task="boo").call("ask_code_review", task="review this").reply("gave up")
    reply = await say(caller)("try both")
    assert reply.text == "gave up"
    offered = {t.name: t.description for t in lead.requests[0].tools}
    assert offered["ask_code_review"] == "Reviews a diff."
    results = [(p.content, p.is_error) for m in lead.requests[-1].messages for p in m.tool_results]
    assert results == [
        ("the agent 'ghost' does not exist in this daemon; answer without it", True),
        ("the agent 'code-review' is not running; answer without it", True),
    ]


async def test_bad_tasks_are_refused(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(harness)
    lead.call("ask_researcher").call("ask_researcher", task="  ").call("ask_researcher", task="/reset")
    lead.reply("ok")
    await say(caller)("go")
    results = [(p.content, p.is_error) for m in lead.requests[-1].messages for p in m.tool_results]
    assert [e for _, e in results] == [True, True, True]
    assert "task must be non-empty text" in results[0][0] and "cannot start with '/'" in results[2][0]
    assert helper.requests == [] and await runs(sub) == []


async def test_a_failing_sub_agent_is_a_tool_error_and_a_failed_run_in_its_file(harness: Harness) -> None:
    caller, sub, lead, helper = await pair(harness)
    helper.fail("HTTP 500 upstream")
    lead.call("ask_researcher", task="dig").reply("could not")
    await say(caller)("go")
    content, is_error = last_result(lead.requests[-1])
    assert is_error and content.startswith("researcher could not answer:") and "HTTP 500 upstream" in content
    (child,) = await runs(sub)
    assert child["status"] == "error" and child["parent"] == (await runs(caller))[0]["id"]


async def test_an_agent_cannot_call_itself_or_its_caller(harness: Harness) -> None:
    model, peers = ScriptedProvider("m"), LocalPeers()
    a = await harness.agent(
        "model: m/x\nsubagents: [{agent: a}, {agent: b}]\n", "a", {"m": model}, peers=peers
    )
    b = await harness.agent("model: m/x\nsubagents: [{agent: a}]\n", "b", {"m": model}, peers=peers)
    peers.add(a, b)
    model.call("ask_a", task="me again")  # a -> a
    model.call("ask_b", task="ask a back")  # a -> b
    model.call("ask_a", task="back to a")  # b -> a: refused
    model.reply("b gives up")  # b's answer
    model.reply("a done")
    reply = await say(a)("start")
    assert reply.text == "a done"
    b_request = model.requests[3]
    content, is_error = last_result(b_request)
    assert is_error and "a is already answering in this chain (a -> b)" in content
    content, is_error = last_result(model.requests[-1])
    assert (content, is_error) == ("b gives up", False)
    self_call = next(p for m in model.requests[-1].messages for p in m.tool_results)
    assert self_call.is_error and "a is already answering in this chain (a)" in self_call.content


async def test_chains_are_at_most_max_depth_calls_deep(harness: Harness) -> None:
    model, peers = ScriptedProvider("m"), LocalPeers()
    names = ["a", "b", "c", "d", "e"]
    for name, nxt in zip(names, [*names[1:], None], strict=True):
        slots = f"subagents: [{{agent: {nxt}}}]\n" if nxt else ""
        peers.add(await harness.agent(f"model: m/x\n{slots}", name, {"m": model}, peers=peers))
    assert subagents.MAX_DEPTH == 3
    for nxt in names[1:]:
        model.call(f"ask_{nxt}", task="pass it on")
    model.reply("d could not go further")  # d's answer after e was refused
    for name in ("c", "b", "a"):
        model.reply(f"{name} relays")
    agents = [peers.agents[name] for name in names]
    reply = await say(agents[0])("start")
    assert reply.text == "a relays"
    refused = last_result(model.requests[4])  # d's second request: the result of ask_e
    assert refused[1] and "at most 3 deep (a -> b -> c -> d -> e)" in refused[0]
    # a -> b -> c -> d ran: three linked runs below a's
    keys = [(await runs(r))[0]["key"] for r in agents[1:4]]
    assert keys == ["agent:a:webhook:c1", "agent:b:agent:a:webhook:c1", "agent:c:agent:b:agent:a:webhook:c1"]
    assert await runs(agents[4]) == []


def test_keys_too_long_to_nest_become_a_stable_digest() -> None:
    long_key = "webhook:" + "x" * 250
    key = subagents.subagent_key("coordinator", long_key)
    assert key.startswith("agent:coordinator:sha256-") and key == subagents.subagent_key(
        "coordinator", long_key
    )
    assert subagents.subagent_key("a", "webhook:t") == "agent:a:webhook:t"
    assert subagents.tool_name("code-review") == "ask_code_review"
