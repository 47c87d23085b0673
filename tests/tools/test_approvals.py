"""`ask`: a run pauses for a person, keeps its place in the conversation, and resumes when someone decides,
when nobody does in time, and after a restart; every step is in the audit trail."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.queries import ActiveThread, ApprovalById, AuditEvents, OpenApprovals
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, DecideApproval, RowMissing
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import Harness, open_api, say
from tests.tools.support import agent_yaml, openai, stdio_server, tool_agent, tool_events, tool_results

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL


def approval_id(reply: Reply) -> str:
    match = re.search(r"Approval needed \[([0-9a-f]{6})\]", reply.text)
    assert match, reply.text
    assert reply.approval == match.group(1)
    return match.group(1)


async def asking_agent(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path, **policy: object
) -> Agent:
    yaml_text = agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"], **policy)
    return await tool_agent(harness, openai(fake, client), yaml_text)


def script_write(fake: FakeLLM, answer: str = "Saved your note.") -> None:
    fake.reply(
        tool_calls=[("files__write_file", {"path": "note.txt", "content": "hello", "token": "s3cret"})]
    )
    fake.reply(answer)


async def transcript(agent: Agent, key: str = "webhook:c1") -> list[tuple[str, str]]:
    thread = await agent.state.store.read(ActiveThread(key))
    return [(m.message.role, m.message.text) for m in thread.messages]


async def test_ask_then_approve_runs_the_call_and_later_messages_wait_in_order(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root)
    script_write(fake)
    asked = await say(agent, user="ana")("save a note saying hello")
    approval = approval_id(asked)
    assert "files__write_file" in asked.text and '"token": "[redacted]"' in asked.text
    assert f"/approve {approval}" in asked.text and not (root / "note.txt").exists()

    # a later message of the conversation waits behind the paused run, /status does not
    later = asyncio.create_task(say(agent, user="ana")("and then?"))
    await wait_until(lambda: agent.state.locks.waiting("webhook:c1") == 1, "the later message to queue")
    status = await say(agent, user="ana")("/status")
    assert f"Waiting for approval [{approval}]: files__write_file" in status.text
    assert "1 later message of this conversation waits in order behind it" in status.text
    facts = await agent.status_of("webhook:c1")
    assert [a["id"] for a in facts["approvals"]] == [approval] and facts["messages_waiting"] == 1
    assert not later.done()

    fake.reply("Then nothing else.")
    approved = await say(agent, user="ana")(f"/approve {approval}")
    assert approved.text == "Saved your note."  # asked in the same conversation: the answer is the reply
    assert (root / "note.txt").read_text() == "hello"
    assert (await later).text == "Then nothing else."
    assert tool_results(fake.requests[1].json)[-1] == "wrote 5 characters to note.txt"
    assert await transcript(agent) == [
        ("user", "save a note saying hello"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "Saved your note."),
        ("user", "and then?"),
        ("assistant", "Then nothing else."),
    ]
    events = await tool_events(agent)
    assert [a for a, _ in events] == ["approval_requested", "approved", "called"]
    requested, decided, called = (d for _, d in events)
    assert requested["approval"] == approval and requested["args"]["token"] == "[redacted]"
    assert requested["rule"] == "ask: files.write_file" and requested["user"] == "ana"
    assert decided["by"] == "webhook:ana" and called["approval"] == approval
    assert called["approved_by"] == "webhook:ana" and called["duration_ms"] > 0
    assert all(r.get("run_id") for r in await agent.audit_events("tool"))
    assert (await agent.approvals()) == []


async def test_ask_then_deny_gives_the_model_a_refusal(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root)
    script_write(fake, "Understood, I did not save it.")
    approval = approval_id(await say(agent)("save a note"))
    denied = await say(agent)(f"/deny {approval}")
    assert denied.text == "Understood, I did not save it."
    assert not (root / "note.txt").exists()
    [refusal] = tool_results(fake.requests[1].json)
    assert "webhook:u1 refused this call; it was not run" in refusal
    assert [(a, d.get("by")) for a, d in await tool_events(agent)] == [
        ("approval_requested", None),
        ("refused", "webhook:u1"),
    ]
    again = await say(agent)(f"/approve {approval}")
    assert again.text == f"Approval [{approval}] was already refused."
    # a second decision in the store refuses its whole batch (its audit row too)
    late = AuditRecord("tool", "expired", "webhook:c1", None, {"approval": approval})
    with pytest.raises(RowMissing):
        await agent.state.store.write(
            DecideApproval(approval, "expired", None, 0.0), AppendAudit(agent.name, [late], 0.0)
        )
    assert [a for a, _ in await tool_events(agent)] == ["approval_requested", "refused"]


async def test_an_approval_nobody_answers_expires_as_refused(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root, approval_timeout_s=1)
    script_write(fake, "Nobody approved, so I did not save it.")
    approval_id(await say(agent)("save a note"))
    await wait_until(lambda: len(fake.requests) == 2, "the run to resume after the expiry", 10)
    await wait_until(lambda: not agent.state.waiting_approvals, "the approval to close")
    [refusal] = tool_results(fake.requests[1].json)
    assert "Nobody approved this call in time; it was not run." in refusal
    assert not (root / "note.txt").exists()
    assert [a for a, _ in await tool_events(agent)] == ["approval_requested", "expired"]
    assert (await transcript(agent))[-1] == ("assistant", "Nobody approved, so I did not save it.")


async def test_a_pending_approval_survives_a_restart(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root)
    script_write(fake, "Saved after the restart.")
    approval = approval_id(await say(agent)("save a note", "delivery-1"))
    agent = await harness.restart(agent)
    await agent.state.tool_servers.wait_ready(20)
    assert [a["id"] for a in (await agent.approvals())] == [approval]
    # the redelivered message is not run again; the conversation is still held by the paused run
    assert (await say(agent)("save a note", "delivery-1")).duplicate
    later = asyncio.create_task(say(agent)("anything else?"))
    await wait_until(lambda: agent.state.locks.waiting("webhook:c1") == 1, "the later message to queue")
    fake.reply("No.")
    approved = await say(agent)(f"/approve {approval}")
    assert approved.text == "Saved after the restart."
    assert (root / "note.txt").read_text() == "hello"
    assert (await later).text == "No."
    roles = [role for role, _ in await transcript(agent)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    stored = await agent.state.store.read(ApprovalById(approval))
    assert stored is not None and (stored.status, stored.state) == ("approved", None)
    assert await agent.state.store.read(OpenApprovals()) == []  # the saved run state goes once committed


async def test_an_approver_who_is_not_allowed_is_refused_and_audited(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root, approvers=["slack:U777"])
    script_write(fake, "Saved, thanks to the admin.")
    asked = await say(agent, user="eve")("save a note")
    approval = approval_id(asked)
    assert "approvers: slack:U777" in asked.text
    refused = await say(agent, user="eve")(f"/approve {approval}")
    assert refused.text == f"You cannot answer approval [{approval}]: only slack:U777 can."
    [denial] = await agent.state.store.read(AuditEvents(agent.name, "permission", None, 10))
    assert denial["action"] == "denied"
    assert denial["data"] == {
        "approval": approval,
        "tool": "files__write_file",
        "by": "webhook:eve",
        "decision": "approved",
        "reason": "not an approver",
    }
    assert [a["id"] for a in (await agent.approvals())] == [approval]
    # the admin answers from Slack, another conversation: the answer is told to them, as the webhook
    # conversation cannot be posted into
    admin = InboundEvent(agent.name, "slack:D1", f"/approve {approval}", "slack", user_id="U777")
    answered = await agent.handle(admin)
    assert answered.text.startswith(f"Approved [{approval}] (files__write_file in webhook:c1).")
    assert answered.text.endswith("The run's answer:\nSaved, thanks to the admin.")
    assert (root / "note.txt").exists()


async def test_a_sub_agent_call_cannot_ask(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await asking_agent(harness, fake, client, root)
    script_write(fake, "I could not ask anyone.")
    event = InboundEvent(agent.name, "agent:boss:webhook:c1", "save a note", "agent", user_id="u1")
    reply = await agent.handle(event)
    assert reply.text == "I could not ask anyone." and reply.approval is None
    assert "needs a person's approval" in tool_results(fake.requests[1].json)[0]
    assert [a for a, _ in await tool_events(agent)] == ["refused"]


async def test_approve_over_http_and_filter_the_audit_by_tool(
    tmp_path: Path, fake: FakeLLM, root: Path
) -> None:
    settings = f"providers:\n  fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: sk-test}}\n"
    (tmp_path / "agentd.yaml").write_text(settings)
    yaml_text = (
        agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"]) + "channels: {webhook: {}}\n"
    )
    daemon, api = await open_api(tmp_path, {"keeper": yaml_text})
    try:
        await daemon.agent("keeper").state.tool_servers.wait_ready(20)
        script_write(fake, "Saved over HTTP.")
        body = {"conversation_id": "c9", "text": "save a note", "user_id": "ana"}
        asked = (await api.post("/agents/keeper/messages", json=body)).json()
        approval = asked["approval"]
        assert asked["reply"].startswith(f"Approval needed [{approval}]")
        listed = (await api.get("/agents/keeper/approvals")).json()["approvals"]
        assert [(a["id"], a["tool"], a["args"]["token"]) for a in listed] == [
            (approval, "files__write_file", "[redacted]")
        ]
        assert (
            await api.post("/agents/keeper/approvals/nope00", json={"decision": "approve"})
        ).status_code == 404
        bad = await api.post(f"/agents/keeper/approvals/{approval}", json={"decision": "maybe"})
        assert bad.status_code == 422
        decided = await api.post(f"/agents/keeper/approvals/{approval}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        out = decided.json()
        assert out["status"] == "approved" and out["reply"]["reply"] == "Saved over HTTP."
        assert out["reply"]["conversation_key"] == "webhook:c9"
        again = await api.post(f"/agents/keeper/approvals/{approval}", json={"decision": "deny"})
        assert again.status_code == 409
        events = (await api.get("/audit", params={"kind": "tool", "tool": "files__write_file"})).json()[
            "events"
        ]
        assert [e["action"] for e in events] == ["approval_requested", "approved", "called"]
        assert events[1]["data"]["by"] == "http"
        none = (await api.get("/audit", params={"kind": "tool", "tool": "files__read_file"})).json()["events"]
        assert none == []
        described = {a["name"]: a for a in (await api.get("/agents")).json()["agents"]}
        assert described["keeper"]["tool_servers"]["files"]["status"] == "running"
        tools = (await api.get("/agents/keeper/tools")).json()["tools"]
        assert ("files__write_file", "ask") in [(t["name"], t["decision"]) for t in tools]
    finally:
        await api.aclose()
        await daemon.shutdown()
