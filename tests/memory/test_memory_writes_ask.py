"""`memory.writes: ask` (issue 11, part 4): remember, forget and save_episode wait for a person's yes,
through the same approval flow as `tools.ask`: pending, /approve and /deny, expiry, the audit trail."""

from __future__ import annotations

import re

import pytest

from agentd.events import Reply
from agentd.store.queries import AuditEvents, MemoryKeys
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

ASKS = "memory: {scope: thread, persistent: true, writes: ask}\n"


def approval_of(reply: Reply) -> str:
    match = re.search(r"Approval needed \[([0-9a-f]{6})\]", reply.text)
    assert match, reply.text
    return match.group(1)


async def test_remember_waits_for_a_yes_and_the_audit_never_holds_the_value(harness: Harness) -> None:
    agent = await harness.agent(ASKS)
    talk = say(agent, user="ana")
    asked = await talk("remember door_code: 4471-secret")
    approval = approval_of(asked)
    assert "memory__remember" in asked.text or "remember" in asked.text
    assert await agent.state.store.read(MemoryKeys()) == {}  # nothing written yet
    done = await talk(f"/approve {approval}")
    assert "Remembered door_code." in done.text
    assert await agent.state.store.read(MemoryKeys()) == {"": ["door_code"]}
    events = await agent.state.store.read(AuditEvents(kind="tool"))
    actions = [e["action"] for e in events]
    assert actions[:2] == ["approval_requested", "approved"] and "called" in actions
    assert "4471" not in str(events)  # memory values stay out of the audit, as ever


async def test_forget_denied_keeps_the_memory(harness: Harness) -> None:
    agent = await harness.agent(ASKS)
    talk = say(agent, user="ana")
    await talk(f"/approve {approval_of(await talk('remember city: Lisbon'))}")
    asked = await talk("forget city")
    denied = await talk(f"/deny {approval_of(asked)}")
    assert "failed" in denied.text or "refused" in denied.text.lower()
    assert await agent.state.store.read(MemoryKeys()) == {"": ["city"]}  # still held


async def test_writes_auto_is_the_default_and_asks_nobody(harness: Harness) -> None:
    agent = await harness.agent("memory: {scope: thread, persistent: true}\n")
    assert (await say(agent)("remember city: Porto")).text == "Remembered city."
