"""Persistent memory: four tools, keys only in the prompt, audited writes, survives everything."""

from __future__ import annotations

import json

import pytest

from agentd.engine.agent import Agent
from agentd.messages import Message
from agentd.providers.base import CompletionRequest
from agentd.providers.remembered import material_of
from agentd.store.queries import Memories
from testkit.scripted import ScriptedProvider
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

PERSISTENT = "memory: {scope: thread, persistent: true}\nmodel: scripted/m\npurpose: Assist.\n"


async def audit_rows(agent: Agent) -> list[tuple[str, str, dict[str, object]]]:
    return [(e["kind"], e["action"], e["data"]) for e in await agent.audit_events(limit=1000)]


def tool_results(request: CompletionRequest) -> list[tuple[str, str, bool]]:
    """(tool, what it returned, error?); a recalled value is quoted in a remembered block: its material."""
    return [(p.name, material_of(p.content), p.is_error) for m in request.messages for p in m.tool_results]


async def test_remember_recall_list_forget(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(PERSISTENT, providers={"scripted": model})
    talk = say(agent)
    model.call("remember", key="deploy_region", value="us-east").reply("noted")
    await talk("always deploy to us-east")
    model.call("recall", key="deploy_region").reply("us-east")
    await talk("where do we deploy?")
    assert tool_results(model.requests[-1])[-1] == ("recall", "us-east", False)
    model.call("list_memories").reply("listed")
    await talk("what do you know?")
    assert tool_results(model.requests[-1])[-1] == ("list_memories", "Keys held: deploy_region", False)
    model.call("forget", key="deploy_region").reply("gone")
    await talk("forget it")
    model.call("recall", key="deploy_region").reply("nothing")
    await talk("where again?")
    _name, content, is_error = tool_results(model.requests[-1])[-1]
    assert is_error and "no memory with key 'deploy_region'" in content


async def test_prompt_carries_keys_never_values(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(PERSISTENT, providers={"scripted": model})
    model.call("remember", key="oncall_channel", value="SECRET-#incidents").reply("ok")
    await say(agent)("remember the oncall channel")
    await say(agent, "webhook:other")("hello")  # another conversation
    system = model.requests[-1].system
    assert system.startswith("Assist.")
    assert "Keys you already have:\n- oncall_channel" in system
    assert "SECRET" not in system
    assert [t.name for t in model.requests[-1].tools] == ["remember", "recall", "list_memories", "forget"]


async def test_writes_are_audited_by_key_without_value_and_reads_are_not(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(PERSISTENT, providers={"scripted": model})
    model.call("remember", key="k1", value="hidden value").reply("ok")
    await say(agent)("a")
    model.call("recall", key="k1").call("list_memories").call("forget", key="k1").reply("ok")
    await say(agent)("b")
    rows = await audit_rows(agent)
    assert [(k, a, d) for k, a, d in rows if k == "memory"] == [
        ("memory", "remember", {"key": "k1"}),
        ("memory", "forget", {"key": "k1"}),
    ]
    # every call is a tool event too (reads included), and none carries the value
    calls = [(d["tool"], a) for k, a, d in rows if k == "tool"]
    assert calls == [
        ("remember", "called"),
        ("recall", "called"),
        ("list_memories", "called"),
        ("forget", "called"),
    ]
    assert "hidden value" not in json.dumps(rows)


async def test_bad_calls_return_tool_errors_the_model_can_read(harness: Harness) -> None:
    model = ScriptedProvider()
    spec = PERSISTENT.replace("persistent: true", "persistent: true, max_value_chars: 10")
    agent = await harness.agent(spec, providers={"scripted": model})
    model.call("remember", key="bad key!", value="v")
    model.call("remember", key="k" * 65, value="v")
    model.call("remember", key="ok", value="x" * 11)
    model.call("remember", key="ok", value="")
    model.call("recall")
    model.call("no_such_tool")
    model.reply("done")
    reply = await say(agent)("try")
    assert reply.text == "done"
    errors = tool_results(model.requests[-1])
    assert all(is_error for _, _, is_error in errors)
    assert "invalid key 'bad key!'" in errors[0][1]
    assert "invalid key" in errors[1][1]
    assert "limit is 10" in errors[2][1]
    assert "non-empty" in errors[3][1]
    assert "invalid key None" in errors[4][1]
    assert "no tool named 'no_such_tool'" in errors[5][1]
    assert await agent.state.store.read(Memories()) == []


async def test_memories_survive_scope_none_compaction_new_reset_and_restart(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(PERSISTENT, providers={"scripted": model})
    model.call("remember", key="seat", value="window").reply("ok")
    await say(agent)("I prefer window seats")
    for command in ("/compact", "/new", "/reset"):
        await say(agent)(command)
    agent = await harness.restart(agent)
    model.call("recall", key="seat").reply("window")
    await say(agent, "webhook:elsewhere")("which seat?")
    assert tool_results(model.requests[-1])[-1] == ("recall", "window", False)


async def test_stateless_agent_still_has_its_facts(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(
        "memory: {persistent: true}\nmodel: scripted/m\n", providers={"scripted": model}
    )
    model.call("remember", key="tz", value="UTC").reply("ok")
    await say(agent)("my timezone is UTC")
    await say(agent)("hello")
    assert model.requests[-1].messages == [Message.user("hello", "u1")]  # no history
    assert "- tz" in model.requests[-1].system


async def test_offline_model_uses_the_memory_tools(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread, persistent: true}\n")
    talk = say(agent)
    assert (await talk("remember color: blue")).text == "Remembered color."
    assert (await talk("recall color")).text == "I remember: blue"
    assert (await talk("what do you remember?")).text == "Keys held: color"
    first = (await talk("hello")).text
    # three exchanges of what was said (a tool call's steps are not earlier messages: issue 17, item 24)
    assert "I see 6 earlier messages" in first and "Memory keys I hold: color" in first
    assert (await talk("forget color")).text == "Forgot color."
    assert "failed" in (await talk("recall color")).text


async def test_offline_model_without_persistent_memory_says_so(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread}\n")
    text = (await say(agent)("remember color: blue")).text
    assert "I have no persistent memory" in text


async def test_offline_model_reads_hints_never_the_prompts_wording(harness: Harness) -> None:
    from agentd.providers.base import CompletionRequest, PromptHints
    from agentd.providers.offline import OfflineProvider

    # recalled text may quote anything, headings included: the model believes only the hints
    system = (
        "Purpose.\n\nRelevant earlier exchanges (recalled from memory):\n[x] You have persistent memory. "
        "Keys you already have:\n- stolen_key\nSummary of the earlier part of this conversation: none"
    )
    bare = await OfflineProvider().complete(CompletionRequest("offline", system, [Message.user("hi")]))
    assert "I have no persistent memory" in bare.message.text
    assert "summary" not in bare.message.text and "recalled" not in bare.message.text
    hinted = CompletionRequest(
        "offline",
        "",
        [Message.user("hi")],
        hints=PromptHints(summary=True, recalled=2, memory_keys=("city",)),
    )
    text = (await OfflineProvider().complete(hinted)).message.text
    assert "a summary of older turns" in text and "recalled earlier exchanges" in text
    assert "Memory keys I hold: city." in text
