"""/compact /new /reset /status /help: each works, changes what it says, and is audited."""

from __future__ import annotations

import pytest

from agentd.engine.agent import Agent
from agentd.engine.approval_commands import is_approval_command
from agentd.engine.commands import HANDLERS, is_command
from agentd.engine.elicitations import is_elicitation_command
from agentd.events import COMMANDS
from agentd.store.queries import ThreadHistory
from testkit.scripted import ScriptedProvider
from tests.support import Harness, every_message, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

THREAD = "memory: {scope: thread, compact_at_tokens: 5000}\nmodel: scripted/m\n"


async def command_audit(agent: Agent) -> list[str]:
    return [e["action"] for e in await agent.audit_events(kind="command")]


def test_the_engine_runs_exactly_the_commands_of_the_table_every_channel_offers() -> None:
    """agentd.events.COMMANDS is what /help lists and Telegram's menu offers: each is run by the engine
    (a handler, or the approval commands), and the engine runs nothing the table does not name."""
    approvals = {name for name in COMMANDS if is_approval_command(f"/{name} abc123")}
    assert approvals == {"approve", "deny"}
    questions = {name for name in COMMANDS if is_elicitation_command(f"/{name} abc123")}
    assert questions == {"answer", "decline"}
    assert set(HANDLERS) == set(COMMANDS) - approvals - questions
    assert all(is_command(f"/{name}") for name in COMMANDS)


async def test_new_archives_and_starts_fresh_under_the_same_key(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(THREAD, providers={"scripted": model})
    talk = say(agent)
    await talk("before")
    assert "archived" in (await talk("/new")).text
    await talk("after")
    assert [m.text for m in model.requests[-1].messages] == ["after"]
    threads = await agent.state.store.read(ThreadHistory())
    assert [(t["status"], len(t["messages"])) for t in threads] == [
        ("archived", 2),
        ("active", 2),
    ]  # the old transcript is kept in the file
    agent = await harness.restart(agent)
    await say(agent)("later")
    assert [m.text for m in model.requests[-1].messages] == ["after", "default reply to: after", "later"]


async def test_reset_deletes_the_transcript(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(THREAD, providers={"scripted": model})
    talk = say(agent)
    await talk("secret stuff")
    assert (await talk("/reset")).text == "Deleted this conversation's transcript."
    assert await every_message(agent) == []
    await talk("fresh")
    assert [m.text for m in model.requests[-1].messages] == ["fresh"]
    agent = await harness.restart(agent)
    await say(agent)("again")
    assert "secret stuff" not in str(model.requests[-1].messages)


async def test_status_reports_context_and_totals(harness: Harness) -> None:
    model = ScriptedProvider().reply("a", usage=(1234, 7))
    agent = await harness.agent(THREAD, providers={"scripted": model})
    talk = say(agent)
    await talk("hi")
    text = (await talk("/status")).text
    assert "Agent: bot" in text and "Model: scripted/m" in text
    assert "Conversation: webhook:c1 (thread 1)" in text
    assert "Context: 1234 tokens of 5000 before compaction" in text
    assert "Runs: 1 message, 0 compactions, 0 errors; tokens in 1234, out 7" in text
    assert "Memory: full (scope thread, persistent memory off)" in text  # not a Python dict


async def test_status_says_when_the_model_is_offline(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread}\n")
    await say(agent)("hi")
    text = (await say(agent)("/status")).text
    assert "Model: offline/offline (offline: the built-in model, no network)" in text
    assert "(estimated)" in text


async def test_help_unknown_and_audit(harness: Harness) -> None:
    agent = await harness.agent(THREAD, providers={"scripted": ScriptedProvider()})
    talk = say(agent)
    help_text = (await talk("/help")).text
    for name in ("/compact", "/new", "/reset", "/status", "/help"):
        assert name in help_text
    assert all(f"/{name} — {what}" in help_text for name, what in COMMANDS.items())
    assert (await talk("/frobnicate")).text.startswith("Unknown command /frobnicate.")
    assert (await talk("/status@mybot")).text.startswith("Agent: bot")  # Telegram-style suffix
    await talk("/compact")
    await talk("/new")
    await talk("/reset")
    assert await command_audit(agent) == ["help", "unknown", "status", "compact", "new", "reset"]
    runs = await agent.runs(limit=1000)
    assert sum(r["trigger"] == "command" for r in runs) == 6


async def test_history_commands_on_a_stateless_agent_explain_themselves(harness: Harness) -> None:
    agent = await harness.agent("model: scripted/m\n", providers={"scripted": ScriptedProvider()})
    for command in ("/compact", "/new", "/reset"):
        assert "keeps no conversation history" in (await say(agent)(command)).text


async def test_compact_applies_to_the_full_transcript_only(harness: Harness) -> None:
    agent = await harness.agent(
        "memory: {strategy: {kind: window, messages: 4}}\nmodel: scripted/m\n",
        providers={"scripted": ScriptedProvider()},
    )
    for i in range(4):
        await say(agent)(f"q{i}")
    reply = await say(agent)("/compact")
    assert "applies to the full transcript only" in reply.text
    stored = await every_message(agent)
    assert stored and not any(m["compacted"] for m in stored)  # (SUM over no rows would not be 0)
