"""The routes an operator expects on day one: a paged conversation list, deleting a memory and a
conversation (audited), `/` leading to the UI, a rejected agent saying why, a removed agent's audit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from agentd.cli import main
from tests.support import send, serving

ASSISTANT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
PER_USER = "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"


async def audit(client: httpx.AsyncClient, agent: str, kind: str) -> list[dict[str, object]]:
    r = await client.get("/audit", params={"agent": agent, "kind": kind})
    assert r.status_code == 200, r.text
    events: list[dict[str, object]] = r.json()["events"]
    return events


async def test_the_root_leads_to_the_ui(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        r = await client.get("/")
        assert r.status_code == 307 and r.headers["location"] == "/ui/"


async def test_conversations_are_listed_a_page_at_a_time(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        for conversation in ("one", "two", "three"):
            await send(client, "assistant", conversation, "hello")
        first = await client.get("/agents/assistant/conversations", params={"limit": 2})
        assert first.status_code == 200, first.text
        page = first.json()
        # the most recently active first
        assert [c["conversation_key"] for c in page["conversations"]] == ["webhook:three", "webhook:two"]
        assert page["conversations"][0]["messages"] == 2 and page["next_offset"] == 2
        rest = (await client.get("/agents/assistant/conversations", params={"limit": 2, "offset": 2})).json()
        assert [c["conversation_key"] for c in rest["conversations"]] == ["webhook:one"]
        assert rest["next_offset"] is None
        assert (await client.get("/agents/nobody/conversations")).status_code == 404


async def test_a_memory_is_deleted_on_request_and_audited(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        await send(client, "assistant", "c", "remember city: Lisbon")
        r = await client.delete("/agents/assistant/memories/city")
        assert r.status_code == 200 and r.json()["deleted"] is True
        [event] = [e for e in await audit(client, "assistant", "memory") if e["action"] == "forget"]
        assert event["data"] == {"key": "city", "by": "http:127.0.0.1"}
        # gone for the agent too: it no longer lists or recalls it
        reply = await client.post(
            "/agents/assistant/messages", json={"conversation_id": "c", "text": "recall city"}
        )
        assert "no memory with key 'city'" in reply.json()["reply"]
        again = await client.delete("/agents/assistant/memories/city")
        assert again.status_code == 404 and "no memory with key 'city'" in again.json()["error"]
        bad = await client.delete("/agents/assistant/memories/not%20a%20key")
        assert bad.status_code == 400 and "not a memory key" in bad.json()["error"]


async def test_a_persons_memory_is_deleted_in_their_scope_only(tmp_path: Path) -> None:
    async with serving(tmp_path, {"a": PER_USER}) as (_daemon, client):
        await send(client, "a", "c", "remember shoe: 42", user_id="ana")
        await send(client, "a", "c", "remember shoe: 38", user_id="bob")
        assert (await client.delete("/agents/a/memories/shoe")).status_code == 404  # not the agent's
        r = await client.delete("/agents/a/memories/shoe", params={"scope": "user:ana"})
        assert r.status_code == 200 and r.json()["scope"] == "user:ana"
        kept = await client.post(
            "/agents/a/messages", json={"conversation_id": "c", "text": "recall shoe", "user_id": "bob"}
        )
        assert "38" in kept.json()["reply"]
        bad = await client.delete("/agents/a/memories/shoe", params={"scope": "bob"})
        assert bad.status_code == 400 and "not a scope" in bad.json()["error"]


async def test_a_conversation_is_deleted_with_its_archived_threads_and_audited(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT}) as (_daemon, client):
        await send(client, "assistant", "c", "first thread")
        await send(client, "assistant", "c", "/new")
        await send(client, "assistant", "c", "second thread")
        await send(client, "assistant", "other", "stays")
        r = await client.delete("/agents/assistant/conversations/webhook:c")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "agent": "assistant",
            "conversation_key": "webhook:c",
            "threads": 2,
            "messages": 4,
        }
        [event] = await audit(client, "assistant", "conversation")
        assert event["action"] == "delete" and event["conversation_key"] == "webhook:c"
        assert event["data"] == {"threads": 2, "messages": 4, "by": "http:127.0.0.1"}
        listed = (await client.get("/agents/assistant/conversations")).json()["conversations"]
        assert [c["conversation_key"] for c in listed] == ["webhook:other"]
        # the next message starts from nothing
        shown = (await client.get("/agents/assistant/conversations/webhook:c")).json()
        assert shown["messages"] == [] and shown["thread_id"] is None
        reply = await client.post("/agents/assistant/messages", json={"conversation_id": "c", "text": "hi"})
        assert "I see 0 earlier messages" in reply.json()["reply"]
        again = await client.delete("/agents/assistant/conversations/webhook:gone")
        assert again.status_code == 404 and "no conversation 'webhook:gone'" in again.json()["error"]


async def test_a_message_to_a_rejected_agent_says_it_is_rejected_and_why(tmp_path: Path) -> None:
    broken = "purpose: x\nmodel: opnai/gpt-4.1-mini\nchannels: {webhook: {}}\n"
    async with serving(tmp_path, {"assistant": ASSISTANT, "broken": broken}) as (_daemon, client):
        listed = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
        assert listed["broken"]["status"] == "error"
        r = await client.post("/agents/broken/messages", json={"conversation_id": "c", "text": "hi"})
        assert r.status_code == 503
        error = r.json()["error"]
        assert error.startswith("agent 'broken' is not running: its file was rejected: ")
        assert "broken.yaml:2:8: model: unknown provider 'opnai'" in error
        assert (await client.get("/agents/broken/runs")).status_code == 503


async def test_a_removed_agents_config_events_stay_readable(tmp_path: Path) -> None:
    async with serving(tmp_path, {"assistant": ASSISTANT, "gone": ASSISTANT}) as (daemon, client):
        (tmp_path / "agents" / "gone.yaml").unlink()
        await daemon.sync_agents()
        assert "gone" not in {a["name"] for a in (await client.get("/agents")).json()["agents"]}
        events = await audit(client, "gone", "config")
        assert [e["action"] for e in events] == ["loaded", "removed"]
        assert (await client.get("/audit", params={"agent": "gone"})).status_code == 200
        ghost = await client.get("/audit", params={"agent": "ghost"})
        assert ghost.status_code == 404 and "no agent named 'ghost'" in ghost.json()["error"]
        # an empty filter filters nothing
        everything = (await client.get("/audit", params={"agent": "", "kind": "config"})).json()["events"]
        assert {e["agent"] for e in everything} >= {"assistant", "gone"}


async def remove_an_agent(root: Path) -> None:
    async with serving(root, {"assistant": ASSISTANT, "gone": ASSISTANT}) as (daemon, client):
        await send(client, "assistant", "c", "remember city: Lisbon")
        (root / "agents" / "gone.yaml").unlink()
        await daemon.sync_agents()


def test_agentd_audit_shows_the_config_events_too_after_the_file_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(remove_an_agent(tmp_path))
    folders = ["--agents", str(tmp_path / "agents"), "--data", str(tmp_path / "data"), "--json"]
    assert main(["audit", "gone", *folders]) == 0
    gone = json.loads(capsys.readouterr().out)
    assert [(e["kind"], e["action"]) for e in gone] == [("config", "loaded"), ("config", "removed")]
    assert main(["audit", "assistant", *folders]) == 0
    events = [(e["kind"], e["action"]) for e in json.loads(capsys.readouterr().out)]
    assert events[0] == ("config", "loaded") and ("memory", "remember") in events
    with pytest.raises(SystemExit, match="no audit events of agent 'ghost'"):
        main(["audit", "ghost", *folders])
