"""A person's data across several agents, every memory strategy, a direct message and a group channel,
with daemon restarts in between: exported as one document, then erased everywhere — their own
conversation gone, their exchanges in the group tombstoned, nothing of theirs left in any file, any
prompt or any hot cache, the audit chains still verifying."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from agentd.daemon import Daemon
from agentd.daemon.audit_trail import verify_chains
from agentd.events import InboundEvent
from agentd.http.app import create_app
from agentd.messages import Message, ToolCallPart
from agentd.providers.base import Completion, CompletionRequest, Usage
from agentd.store.people import TOMBSTONE, is_subject
from agentd.store.queries import AuditEvents

ANA, BOB = "ana-7f3q", "bob-2k9d"
DM, ROOM = f"discord:dm:{ANA}", "discord:room-1"
MARK = re.compile(r"(?:ANA-SECRET|BOB-SAYS)-\d+")
STATE = {
    "kind": "state",
    "model": "mem/m",
    "spec": "keep notes",
    "fields": [{"name": "notes", "description": "what was said"}],
}
AGENTS = {
    "full": {"scope": "thread", "persistent": True, "persistent_scope": "user", "compact_at_tokens": 60},
    "window": {"strategy": {"kind": "window", "messages": 4}},
    "summarized": {"strategy": {"kind": "summarized", "every": 2, "model": "mem/m"}},
    "episodic": {"strategy": {"kind": "episodic", "write": "always"}},
    "semantic": {"strategy": {"kind": "semantic", "model": "mem/m"}},
    "state": {"strategy": STATE},
    "composite": {
        "strategy": {"kind": "composite", "layers": [{"kind": "window", "messages": 4}, {"kind": "episodic"}]}
    },
    "none": {"scope": "none"},
}


class MemoryEcho:
    """One model for every purpose, keeping the markers it is shown: a chat reply names those of the
    message it answers (and calls `remember` when asked to), a summary, a fold or an extraction keeps
    every marker it was given. So wherever a person's words went, their markers went too."""

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        marks = sorted(
            set(MARK.findall(request.system + "\n" + "\n".join(_text(m) for m in request.messages)))
        )
        if request.purpose == "extraction":
            facts = [
                {"key": f"said_{i}", "value": m, "confidence": 1, "source": m} for i, m in enumerate(marks)
            ]
            return _reply(json.dumps({"facts": facts}))
        if request.purpose == "fold":
            return _reply(json.dumps({"notes": " ".join(marks)}))
        if request.purpose == "summary":
            return _reply("Summary: " + " ".join(marks))
        last = request.messages[-1]
        if (
            last.role == "user"
            and last.text.startswith("remember ")
            and any(t.name == "remember" for t in request.tools)
        ):
            key, _, value = last.text.removeprefix("remember ").partition(":")
            call = ToolCallPart(
                id=f"c{len(self.requests)}", name="remember", arguments={"key": key, "value": value.strip()}
            )
            return Completion(Message(role="assistant", parts=(call,)), Usage(500, 5), "tool_calls")
        return _reply("heard " + " ".join(MARK.findall(_text(last))))


def _text(message: Message) -> str:
    return message.text + "".join(r.content for r in message.tool_results)


def _reply(text: str) -> Completion:
    return Completion(Message.assistant(text), Usage(500, 5), "stop")  # 500 tokens: the full agent compacts


def write_folder(root: Path, store_url: str | None) -> None:
    agents = root / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    for name, memory in AGENTS.items():
        (agents / f"{name}.yaml").write_text(
            f"model: mem/m\nmemory: {json.dumps(memory)}\nchannels: {{webhook: {{}}}}\n"
        )
    store = f"store: {{url: '{store_url}'}}\n" if store_url else ""
    (root / "agentd.yaml").write_text("embedder: hash/256\n" + store)


@asynccontextmanager
async def daemon_on(root: Path, model: MemoryEcho) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    daemon = Daemon(root / "agents", root / "data", reload_interval=60, providers={"mem": model})
    await daemon.start()
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
    )
    try:
        yield daemon, client
    finally:
        await client.aclose()
        await daemon.shutdown()


async def say(daemon: Daemon, name: str, key: str, user: str, text: str) -> str:
    agent = daemon.agent(name)
    assert agent is not None
    reply = await agent.handle(InboundEvent(name, key, text, "discord", user_id=user))
    assert await agent.drain(10)  # the memory work after the reply
    assert reply.error is None, reply.error
    return reply.text


async def converse(daemon: Daemon) -> None:
    n = 0
    for agent in AGENTS:
        for user, key, text in (
            (ANA, DM, "hello ANA-SECRET-{n}"),
            (ANA, DM, "remember city: ANA-SECRET-{n}"),
            (ANA, ROOM, "in the room ANA-SECRET-{n}"),
            (BOB, ROOM, "and BOB-SAYS-{n}"),
            (ANA, ROOM, "again ANA-SECRET-{n}"),
            (BOB, ROOM, "later BOB-SAYS-{n}"),
            (BOB, ROOM, "and BOB-SAYS-{n} once more"),
        ):
            n += 1
            await say(daemon, agent, key, user, text.format(n=n))


def holding(data: Path, store_url: str | None, needle: str) -> list[str]:
    """Where the stored data still holds `needle`: every byte of every file of the data folder (SQLite),
    or every text and bytea column of every table of agentd's schema (PostgreSQL: its live rows)."""
    if store_url is None:
        return sorted(p.name for p in data.iterdir() if p.is_file() and needle.encode() in p.read_bytes())
    with psycopg.connect(store_url, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'agentd'"
            " AND data_type IN ('text', 'bytea') ORDER BY 1, 2"
        ).fetchall()
        found = []
        for table, column in columns:
            hit = conn.execute(
                f"SELECT count(*) FROM agentd.{table} WHERE strpos(encode(convert_to({column}::text, 'UTF8'), 'escape'), %s) > 0",  # type: ignore[arg-type]
                (needle,),
            ).fetchone()
            if hit and hit[0]:
                found.append(f"{table}.{column}")
        return found


def everything_in(request: CompletionRequest) -> str:
    return request.system + "\n" + "\n".join(_text(m) for m in request.messages)


@pytest.mark.both_stores
async def test_a_person_is_exported_then_erased_everywhere_across_restarts(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if store_backend == "postgres" else None
    write_folder(tmp_path, url)
    data = tmp_path / "data"
    model = MemoryEcho()

    def files_holding(data: Path, needle: str) -> list[str]:
        return holding(data, url, needle)

    async with daemon_on(tmp_path, model) as (daemon, _):
        await converse(daemon)
    assert files_holding(data, "ANA-SECRET") and files_holding(data, ANA)

    # -- after a restart: exported, every agent, each item with its conversation
    async with daemon_on(tmp_path, model) as (daemon, client):
        r = await client.get(f"/people/{ANA}/export")
        assert r.status_code == 200, r.text
        document = r.json()
        assert document["user_id"] == ANA and set(document["agents"]) >= set(AGENTS)
        full = document["agents"]["full"]
        [dm] = [c for c in full["conversations"] if c["conversation_key"] == DM]
        [room] = [c for c in full["conversations"] if c["conversation_key"] == ROOM]
        assert dm["shared"] is False and room["shared"] is True
        room_text = json.dumps(room)
        assert "ANA-SECRET" in room_text and "BOB-SAYS" not in room_text  # their exchanges only
        assert "heard ANA-SECRET" in room_text  # and what the agent answered them
        assert [m["value"] for m in full["memories"]] == ["ANA-SECRET-2"]
        assert any(e["action"] == "remember" for e in full["audit_events"])
        assert all(r["conversation_key"] in (DM, ROOM) for r in full["runs"])
        assert {e["conversation_key"] for e in document["agents"]["episodic"]["episodes"]} == {DM, ROOM}
        assert all("ANA-SECRET" in f["value"] for f in document["agents"]["semantic"]["facts"])
        [state_dm] = [c for c in document["agents"]["state"]["conversations"] if c["conversation_key"] == DM]
        assert "ANA-SECRET" in json.dumps(state_dm["threads"][0]["memory_state"])
        # their usage (the daemon's own store counts every agent's): every row theirs
        assert document["usage"] and all(u["who"].endswith(f":{ANA}") for u in document["usage"])

        # -- erased: counts per agent, the id recorded only as a salted hash
        r = await client.delete(f"/people/{ANA}")
        assert r.status_code == 200, r.text
        result = r.json()
        assert set(result["erased"]) >= set(AGENTS)
        assert result["erased"]["full"]["conversations"] == 1 and result["erased"]["full"]["tombstoned"] >= 4
        assert result["erased"]["full"]["memories"] == 1
        assert result["erased"]["episodic"]["episodes"] >= 4 and result["erased"]["semantic"]["facts"] >= 1
        assert is_subject(ANA, result["subject"]) and not is_subject(BOB, result["subject"])

        after = (await client.get(f"/people/{ANA}/export")).json()
        assert after["agents"] == {} and after["usage"] == []
        assert all(v.ok for v in await verify_chains(daemon.resources)), "the chains still verify"
        assert files_holding(data, "ANA-SECRET") == [] and files_holding(data, ANA) == []

        # each agent's trail and the daemon's record the erasure, never the id
        for name in AGENTS:
            agent = daemon.agent(name)
            assert agent is not None
            [event] = await agent.state.store.read(AuditEvents(kind="person"))
            assert event["data"]["counts"] == result["erased"][name] and is_subject(
                ANA, event["data"]["subject"]
            )
        assert daemon.daemon_store is not None
        [summary] = await daemon.daemon_store.read(AuditEvents(kind="person"))
        assert summary["data"]["agents"] == {a: c for a, c in result["erased"].items() if a != "_daemon"}

        # nothing hot serves what was erased: the group goes on without her words, she starts afresh
        model.requests.clear()
        for name in AGENTS:
            await say(daemon, name, ROOM, BOB, "what was said BOB-SAYS-99")
            await say(daemon, name, DM, ANA, "what do you remember about me")
        seen = "\n".join(everything_in(r) for r in model.requests)
        assert "ANA-SECRET" not in seen and "BOB-SAYS" in seen and TOMBSTONE in seen
        prompt = await daemon.agent("full").next_prompt(DM, ANA)  # type: ignore[union-attr]
        assert "city" not in prompt["system"]

    # -- after another restart: still nothing of hers, her new messages aside; Bob's data whole
    async with daemon_on(tmp_path, model) as (daemon, client):
        assert all(v.ok for v in await verify_chains(daemon.resources))
        again = (await client.get(f"/people/{ANA}/export")).json()
        assert "ANA-SECRET" not in json.dumps(again)
        bob = (await client.get(f"/people/{BOB}/export")).json()
        assert "BOB-SAYS-4" in json.dumps(bob["agents"]["full"])
    assert files_holding(data, "ANA-SECRET") == []
