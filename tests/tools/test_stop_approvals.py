"""/stop while the run waits for a person's approval (issue 19): the approval is closed (audited
`tool/cancelled`), the run ends `stopped` without its call, the conversation is free for the next
message (one already waiting behind the paused run goes on), and a later /approve says it is gone.
On SQLite files and on PostgreSQL, through the real MCP files server and the fake model server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from agentd.store.queries import ApprovalById
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import Harness, say
from tests.tools.test_approvals import approval_id, asking_agent, script_write, tool_events, transcript

pytestmark = pytest.mark.both_stores


async def test_stop_ends_a_run_waiting_for_an_approval(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root)
    script_write(fake)  # (its second reply, after the call, is never asked for)
    asked = await say(agent)("save a note saying hello")
    approval = approval_id(asked)
    later = asyncio.create_task(say(agent)("and then?"))
    await wait_until(lambda: agent.state.locks.waiting("webhook:c1") == 1, "the later message to queue")

    fake.clear()
    fake.reply("Nothing was saved.")  # the later message's answer
    stopped = await say(agent)("/stop")
    assert stopped.text == "Stopped. Your message is saved; send the next one."
    assert (await asyncio.wait_for(later, 10)).text == "Nothing was saved."
    assert not (root / "note.txt").exists()
    assert len(fake.requests) == 1  # the paused run asked no model again: only the later message did
    runs = [(r["trigger"], r["status"]) for r in await agent.runs("webhook:c1")]
    assert runs == [("message", "stopped"), ("command", "ok"), ("message", "ok")]
    assert await transcript(agent) == [
        ("user", "save a note saying hello"),
        ("assistant", ""),
        ("tool", ""),
        ("user", "and then?"),
        ("assistant", "Nothing was saved."),
    ]
    # the stored call has its result, as the next turn's model saw it
    seen = fake.requests[0].json["messages"]
    assert [m["content"] for m in seen if m["role"] == "tool"] == ["error: not finished: the run was stopped"]

    events = await tool_events(agent)
    assert [a for a, _ in events] == ["approval_requested", "cancelled"]
    cancelled = events[1][1]
    assert cancelled["approval"] == approval and cancelled["by"] == "webhook:u1"
    assert cancelled["reason"] == "stopped (command)"
    [stop] = [e["data"] for e in await agent.audit_events(kind="run") if e["action"] == "stopped"]
    assert stop["reason"] == "command" and stop["by"] == "webhook:u1" and stop["tool_calls_stopped"] == 1
    record = await agent.state.store.read(ApprovalById(approval))
    assert record is not None and record.status == "expired" and record.decided_by == "webhook:u1"
    assert await agent.approvals() == [] and not agent.state.waiting_approvals

    again = await say(agent)(f"/approve {approval}")
    assert again.text == f"Approval [{approval}] is gone: /stop ended its run."
    assert not (root / "note.txt").exists()
    nothing = await say(agent)("/stop")
    assert nothing.text == "Nothing is running in this conversation."
