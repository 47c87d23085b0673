"""persistent_scope: user — one person's facts are invisible to everyone else; agent (default) shares them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.engine.agent import Agent
from agentd.http.app import create_app
from agentd.providers.base import CompletionRequest
from agentd.providers.remembered import material_of
from agentd.store.queries import Memories
from testkit.scripted import ScriptedProvider
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

PER_USER = (
    "memory: {scope: thread, persistent: true, persistent_scope: user}\nmodel: scripted/m\npurpose: Assist.\n"
)
SHARED = "memory: {scope: thread, persistent: true}\nmodel: scripted/m\npurpose: Assist.\n"
# one shared room: both people speak in the same conversation, so only the speaker separates them
ROOM = "slack:C01:1700000000.0001"


def last_result(request: CompletionRequest) -> tuple[str, bool]:
    results = [p for m in request.messages for p in m.tool_results]
    # a recalled value is quoted in a remembered block: its material
    return material_of(results[-1].content), results[-1].is_error


def held_keys(system: str) -> list[str]:
    if "Keys you already have:" not in system:
        return []
    block = system.split("Keys you already have:\n", 1)[1]
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


async def memory_rows(agent: Agent) -> list[tuple[str, str, str]]:
    return [(m["scope"], m["key"], m["value"]) for m in await agent.state.store.read(Memories())]


async def test_one_person_can_never_recall_list_or_forget_anothers_key(harness: Harness) -> None:
    model = ScriptedProvider("scripted")
    agent = await harness.agent(PER_USER, providers={"scripted": model})
    alice, bob = say(agent, ROOM, "alice"), say(agent, ROOM, "bob")

    model.call("remember", key="salary", value="ALICE-SECRET").reply("noted")
    await alice("remember my salary")
    assert await memory_rows(agent) == [("user:alice", "salary", "ALICE-SECRET")]

    model.call("recall", key="salary").reply("?")
    await bob("what is the salary?")
    content, is_error = last_result(model.requests[-1])
    assert is_error and "no memory with key 'salary'" in content and "ALICE-SECRET" not in content
    assert held_keys(model.requests[-1].system) == []  # bob's prompt lists none of alice's keys
    assert "You hold no memories yet." in model.requests[-1].system

    model.call("list_memories").reply("?")
    await bob("list everything")
    assert last_result(model.requests[-1]) == ("No memories held.", False)

    model.call("forget", key="salary").reply("?")
    await bob("forget the salary")
    content, is_error = last_result(model.requests[-1])
    assert is_error and "no memory with key 'salary'" in content

    # bob's own key of the same name is his, and alice's is untouched by anything bob did
    model.call("remember", key="salary", value="BOB-VALUE").reply("ok")
    await bob("remember mine")
    assert await memory_rows(agent) == [
        ("user:alice", "salary", "ALICE-SECRET"),
        ("user:bob", "salary", "BOB-VALUE"),
    ]
    model.call("recall", key="salary").reply("ok")
    await alice("what is my salary?")
    assert last_result(model.requests[-1]) == ("ALICE-SECRET", False)
    assert held_keys(model.requests[-1].system) == ["salary"]
    model.call("forget", key="salary").reply("ok")
    await bob("forget mine")
    assert await memory_rows(agent) == [("user:alice", "salary", "ALICE-SECRET")]
    # the audit trail names the scope (never the value)
    audit = await agent.audit_events(kind="memory", limit=1000)
    assert [(e["action"], e["data"]) for e in audit] == [
        ("remember", {"key": "salary", "scope": "user:alice"}),
        ("remember", {"key": "salary", "scope": "user:bob"}),
        ("forget", {"key": "salary", "scope": "user:bob"}),
    ]


async def test_the_prompt_lists_only_the_speakers_keys_across_conversations_and_restarts(
    harness: Harness,
) -> None:
    model = ScriptedProvider("scripted")
    agent = await harness.agent(PER_USER, providers={"scripted": model})
    model.call("remember", key="alice_pet", value="cat").reply("ok")
    await say(agent, ROOM, "alice")("my pet is a cat")
    model.call("remember", key="bob_car", value="van").reply("ok")
    await say(agent, ROOM, "bob")("my car is a van")
    agent = await harness.restart(agent)
    await say(agent, "discord:dm-alice", "alice")("hello from elsewhere")
    assert held_keys(model.requests[-1].system) == ["alice_pet"]
    await say(agent, "discord:dm-bob", "bob")("hello")
    assert held_keys(model.requests[-1].system) == ["bob_car"]


async def test_without_a_known_speaker_facts_stay_in_their_conversation(harness: Harness) -> None:
    model = ScriptedProvider("scripted")
    agent = await harness.agent(PER_USER, providers={"scripted": model})
    model.call("remember", key="ticket", value="T-1").reply("ok")
    await say(agent, "webhook:one", None)("remember the ticket")
    model.call("recall", key="ticket").reply("?")
    await say(agent, "webhook:two", None)("which ticket?")
    assert last_result(model.requests[-1])[1] is True
    assert held_keys(model.requests[-1].system) == []
    await say(agent, "webhook:one", None)("and here?")
    assert held_keys(model.requests[-1].system) == ["ticket"]


async def test_agent_scope_is_the_default_and_shares_facts(harness: Harness) -> None:
    model = ScriptedProvider("scripted")
    agent = await harness.agent(SHARED, providers={"scripted": model})
    assert agent.spec.memory.persistent_scope == "agent"
    model.call("remember", key="office", value="Berlin").reply("ok")
    await say(agent, ROOM, "alice")("our office is in Berlin")
    model.call("recall", key="office").reply("Berlin")
    await say(agent, "discord:dm-bob", "bob")("where is the office?")
    assert last_result(model.requests[-1]) == ("Berlin", False)
    assert held_keys(model.requests[-1].system) == ["office"]
    assert await memory_rows(agent) == [("", "office", "Berlin")]


async def test_the_offline_model_only_sees_the_speakers_keys(harness: Harness) -> None:
    agent = await harness.agent(PER_USER.replace("model: scripted/m", "model: offline"))
    reply = await say(agent, ROOM, "alice")("remember color: teal")
    assert "Remembered color" in reply.text
    reply = await say(agent, ROOM, "bob")("what do you remember")
    assert "No memories held." in reply.text
    reply = await say(agent, ROOM, "bob")("recall color")
    assert "recall failed: no memory with key 'color'" in reply.text and "teal" not in reply.text
    reply = await say(agent, ROOM, "alice")("recall color")
    assert "I remember: teal" in reply.text


async def test_http_status_lists_the_keys_of_the_person_asked_about(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "per-user.yaml").write_text(
        "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"
    )
    (agents / "shared.yaml").write_text(
        "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
    )
    daemon = Daemon(agents, tmp_path / "data", reload_interval=60)
    await daemon.start()
    try:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as api:
            for agent in ("per-user", "shared"):
                body = {"conversation_id": "t-1", "text": "remember color: teal", "user_id": "alice"}
                r = await api.post(f"/agents/{agent}/messages", json=body)
                assert r.status_code == 200 and "Remembered color" in r.json()["reply"]

            async def keys(agent: str, **params: str) -> list[str]:
                r = await api.get(
                    f"/agents/{agent}/status", params={"conversation_key": "webhook:t-1", **params}
                )
                assert r.status_code == 200, r.text
                result: list[str] = r.json()["memory_keys"]
                return result

            assert await keys("per-user", user_id="alice") == ["color"]
            assert await keys("per-user", user_id="bob") == []
            assert await keys("per-user") == []  # no person named: only this conversation's own facts
            assert await keys("shared", user_id="bob") == ["color"]
            assert await keys("shared") == ["color"]
    finally:
        await daemon.shutdown()
