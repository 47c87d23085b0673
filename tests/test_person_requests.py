"""Data-subject requests around the edges: what a tombstone keeps, which audit fields name a person,
a run paused for their approval, an agent whose file is gone, the CLI beside a daemon and without one,
the offline verifier after an erasure, bad ids."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentd.cli.main import main
from agentd.daemon.audit_trail import verify_chains, verify_store
from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart
from agentd.providers.embedders import HashEmbedder
from agentd.store.people import TOMBSTONE, audit_fields, is_subject, subject_of, tombstone
from agentd.store.queries import PersonData
from testkit.scripted import ScriptedProvider
from tests.daemon_process import DaemonProcess
from tests.support import Harness, say, send, serving

VERIFIER = Path(__file__).parent.parent / "docs" / "verify_audit.py"
PER_USER = "memory: {scope: thread, persistent: true, persistent_scope: user}\nchannels: {webhook: {}}\n"


def test_a_tombstone_keeps_each_messages_place_and_shape_but_nothing_said() -> None:
    call = Message(
        role="assistant",
        parts=(
            TextPart(text="let me look"),
            ToolCallPart(id="c1", name="search", arguments={"q": "ana's address"}),
        ),
    )
    result = Message(role="tool", parts=(ToolResultPart(call_id="c1", name="search", content="12 Main St"),))
    said = Message.user("I live at 12 Main St", user_id="ana", sent_at=1.0)
    stones = [tombstone(m) for m in (said, call, result)]
    assert stones[0] == Message(role="user", parts=(TextPart(text=TOMBSTONE),))
    assert stones[1].tool_calls[0].id == "c1" and stones[1].tool_calls[0].arguments == {}
    assert stones[2].tool_results[0].call_id == "c1" and stones[2].tool_results[0].content == TOMBSTONE
    assert "Main" not in json.dumps([s.model_dump() for s in stones]) and "ana" not in str(stones)


def test_which_audit_fields_name_a_person() -> None:
    def event(conversation_key: str | None, **data: object) -> dict[str, object]:
        return {"conversation_key": conversation_key, "data": data}

    theirs = {"webhook:ana-chat"}
    assert audit_fields(event("webhook:ana-chat", key="city", tool="x"), "ana", theirs) == [
        "conversation_key",
        "data.key",
        "data.tool",
    ]
    assert audit_fields(event("discord:room", user="ana", tool="x"), "ana", theirs) == ["data.user"]
    assert audit_fields(event("discord:room", by="slack:ana", requested_by="slack:bob"), "ana", theirs) == [
        "data.by"
    ]
    assert audit_fields(event(None, partition="user:ana", deleted=3), "ana", theirs) == ["data.partition"]
    assert audit_fields(event("discord:dm:ana", user_id="ana"), "ana", theirs) == [
        "conversation_key",
        "data.user_id",
    ]
    assert (
        audit_fields(event("discord:room", user="banana", key="ana"), "ana", theirs) == []
    )  # not a person field


def test_the_subject_recorded_is_a_salted_hash_only_the_id_opens() -> None:
    first, second = subject_of("ana"), subject_of("ana")
    assert first["scrypt"] != second["scrypt"]  # salted: two erasures of one id do not match each other
    assert is_subject("ana", first) and is_subject("ana", second) and not is_subject("anb", first)
    assert "ana" not in json.dumps(first)


@pytest.mark.both_stores
async def test_a_run_paused_for_the_persons_approval_is_refused_then_erased(harness: Harness) -> None:
    agent = await harness.agent(
        "memory: {scope: thread, persistent: true, persistent_scope: user, writes: ask}\n"
    )
    reply = await say(agent, "webhook:ana", "ana")("remember city: Lisbon")
    assert reply.approval is not None and agent.state.waiting_approvals
    counts = await asyncio.wait_for(agent.erase_person("ana", subject_of("ana"), "test"), 10)
    assert not agent.state.waiting_approvals and counts["conversations"] == 1
    assert not any((await agent.state.store.read(PersonData("ana"))).values())
    assert (await verify_store(agent.state.store, agent.name)).ok


async def test_an_agent_whose_file_is_gone_is_still_exported_and_erased(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": PER_USER, "other": PER_USER}) as (daemon, client):
        await client.post(
            "/agents/keeper/messages",
            json={"conversation_id": "k", "user_id": "ana", "text": "remember pet: Rex"},
        )
        await client.post(
            "/agents/other/messages", json={"conversation_id": "o", "user_id": "ana", "text": "hi"}
        )
        (tmp_path / "agents" / "keeper.yaml").unlink()
        await daemon.sync_agents()
        assert daemon.agent("keeper") is None
        document = (await client.get("/people/ana/export")).json()
        assert set(document["agents"]) == {"keeper", "other"}
        assert document["agents"]["keeper"]["memories"][0]["value"] == "Rex"
        erased = (await client.delete("/people/ana")).json()["erased"]
        assert erased["keeper"]["memories"] == 1 and erased["other"]["conversations"] == 1
        assert (await client.get("/people/ana/export")).json()["agents"] == {}
        assert all(v.ok for v in await verify_chains(daemon.resources))


async def test_a_user_id_that_is_no_id_gets_a_400(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": PER_USER}) as (_daemon, client):
        for request in (client.get("/people/a%20b/export"), client.delete("/people/a%20b")):
            r = await request
            assert r.status_code == 400 and "not a user id" in r.json()["error"]
        r = await client.get("/people/slack%3AU1/export")  # any id the channels give
        assert r.status_code == 200 and r.json()["user_id"] == "slack:U1"
        assert (await client.delete("/people/ana/export")).status_code == 405  # the export is no person
        paths = (await client.get("/openapi.json")).json()["paths"]
        assert {"/people/{user_id}/export", "/people/{user_id}"} <= set(paths)


async def test_after_an_erasure_the_export_still_verifies_offline(tmp_path: Path) -> None:
    async with serving(tmp_path, {"keeper": PER_USER}) as (_daemon, client):
        for user in ("ana", "bob"):
            await send(client, "keeper", f"c-{user}", "remember city: Porto", user_id=user)
        assert (await client.delete("/people/ana")).status_code == 200
    export = tmp_path / "trail.jsonl"
    assert (
        await asyncio.to_thread(
            main,
            [
                "audit",
                "export",
                "-o",
                str(export),
                "--agents",
                str(tmp_path / "agents"),
                "--data",
                str(tmp_path / "data"),
            ],
        )
        == 0
    )
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert any(e["erased"] for e in lines) and "ana" not in export.read_text()
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-I", str(VERIFIER), str(export)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


async def test_the_cli_erases_without_a_daemon_and_through_a_running_one(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "keeper.yaml").write_text(PER_USER)
    daemon = await DaemonProcess(tmp_path).start()
    try:
        async with httpx.AsyncClient(base_url=daemon.url, trust_env=False) as client:
            for user in ("ana", "bob"):
                await send(client, "keeper", f"c-{user}", f"remember city: {user}-town", user_id=user)

            def cli(*argv: str) -> subprocess.CompletedProcess[str]:
                command = [sys.executable, "-m", "agentd.cli", *argv, "--agents", "agents", "--data", "data"]
                return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)

            exported = await asyncio.to_thread(cli, "person", "export", "ana")
            assert exported.returncode == 0, exported.stderr
            assert "ana-town" in exported.stdout and "bob-town" not in exported.stdout
            erased = await asyncio.to_thread(cli, "person", "erase", "ana")
            assert erased.returncode == 0, erased.stderr
            assert "keeper: " in erased.stdout and "memories 1" in erased.stdout

            # the daemon itself let go of it: her key is no longer in her prompt, bob's still is
            async def ask(user: str) -> str:
                body = {"conversation_id": f"c2-{user}", "text": "what do you remember", "user_id": user}
                return str((await client.post("/agents/keeper/messages", json=body)).json()["reply"])

            assert "city" not in await ask("ana") and "city" in await ask("bob")
    finally:
        daemon.stop()
    offline = await asyncio.to_thread(
        main,
        ["person", "erase", "bob", "--agents", str(tmp_path / "agents"), "--data", str(tmp_path / "data")],
    )
    assert offline == 0
    left = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "agentd.cli",
            "person",
            "export",
            "bob",
            "--agents",
            "agents",
            "--data",
            "data",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert json.loads(left.stdout)["agents"] == {}


async def test_another_daemons_hot_copies_let_go_of_what_one_daemon_erased(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two daemons serve one agent from one database; B holds Ana's conversation, her keys and her
    episodes hot; A erases her. B's next turns see none of it: not her DM, not her words in the group."""
    spec = (
        "model: main/m\nmemory: {persistent: true, persistent_scope: user, strategy: {kind: composite,"
        " layers: [{kind: full}, {kind: episodic, top_k: 5}]}}\n"
    )
    harness = Harness(tmp_path / "data", store_url=postgres_url)
    try:
        model_a, model_b = ScriptedProvider("main"), ScriptedProvider("main")
        a = await harness.agent(spec, providers={"main": model_a}, embedder=HashEmbedder(64))
        b = await harness.agent(spec, providers={"main": model_b}, embedder=HashEmbedder(64))
        ana_dm, room = say(b, "discord:dm:ana", "ana"), "discord:room"
        model_b.call("remember", key="city", value="Lisbon-SECRET")
        await ana_dm("remember city: Lisbon-SECRET")
        await ana_dm("my locker code is SECRET-4471")
        await say(b, room, "ana")("in the room SECRET-ROOM")
        await say(b, room, "bob")("hello from bob")
        assert await b.drain(5)
        assert b.memory_keys("discord:dm:ana", "ana") == ["city"]
        counts = await a.erase_person("ana", subject_of("ana"), "test")
        assert counts["conversations"] == 1 and counts["tombstoned"] >= 2 and counts["episodes"] >= 2
        model_b.requests.clear()
        await say(b, room, "bob")("what did everyone say")
        await ana_dm("what do you know about me, locker code?")
        seen = "\n".join(r.system + "\n" + "\n".join(m.text for m in r.messages) for r in model_b.requests)
        assert "SECRET" not in seen and TOMBSTONE in seen and "hello from bob" in seen
        assert b.memory_keys("discord:dm:ana", "ana") == []
        assert (await verify_store(b.state.store, "bot")).ok
    finally:
        await harness.close()
