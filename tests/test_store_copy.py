"""Moving up (issue 12, part 4): a data folder of agents that ran on SQLite, every memory strategy among
them, copied with `agentd store copy` into a throwaway PostgreSQL database and served from there by a
daemon that sees every transcript, memory, episode, run and audit event as the SQLite daemon did."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.cli import main
from agentd.daemon import Daemon
from agentd.events import InboundEvent
from agentd.http.app import create_app
from agentd.messages import Message
from agentd.providers.base import Completion, CompletionRequest
from agentd.providers.offline import OfflineProvider
from agentd.store.postgres.connection import connect
from agentd.store.postgres.migrations import migrate
from agentd.store.queries import ApprovalById, EpisodesById, Runs
from testkit.postgres import PostgresServer

MAIN = "model: main/m\nchannels: {webhook: {}}\n"
AGENTS = {
    "full": MAIN + "memory: {scope: thread, persistent: true}\n",
    "window": MAIN + "memory: {strategy: {kind: window, messages: 2}}\n",
    "summarized": MAIN + "memory: {strategy: {kind: summarized, every: 2}}\n",
    "state": MAIN
    + "memory: {strategy: {kind: state, spec: track the trip, fields: [{name: destination, description: where to}]}}\n",
    "episodic": MAIN
    + "memory: {strategy: {kind: composite, layers: [{kind: window, messages: 2}, {kind: episodic, top_k: 3}]}}\n",
    "semantic": MAIN + "memory: {strategy: {kind: semantic}}\n",
    "asker": MAIN + "memory: {scope: thread, persistent: true, writes: ask}\n",
}
TALKS: dict[str, list[tuple[str, str]]] = {  # agent: (conversation, text) in order
    "full": [
        ("c1", "hello"),
        ("c1", "remember city: Lisbon"),
        ("c1", "I like green tea."),
        ("c1", "/compact"),
        ("c1", "after the compaction"),
        ("c2", "hi"),
        ("c2", "/new"),
        ("c2", "a fresh start"),
        ("c3", "one"),
        ("c3", "/reset"),
        ("c3", "two"),
    ],
    "window": [("w", "first"), ("w", "second"), ("w", "third")],
    "summarized": [("s", "We plan a trip."), ("s", "It is in May."), ("s", "Two of us."), ("s", "By train.")],
    "state": [("t", "We fly to Lisbon."), ("t", "In May.")],
    "episodic": [
        ("e1", "My car is a blue Volvo estate."),
        ("e1", "The spare key for the shed is under the green flowerpot."),
        ("e1", "I was born in Porto."),
        ("e2", "What colour is my car?"),
    ],
    "semantic": [("f", "I always use vim.")],
    "asker": [("a", "hello"), ("a", "remember pet: cat")],
}


class Responder(OfflineProvider):
    """The offline model, which also folds Σ and extracts facts (it cannot on its own)."""

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.purpose == "fold":
            return Completion(Message.assistant('{"destination": "Lisbon"}'), stop_reason="stop")
        if request.purpose == "extraction":
            fact = {"key": "editor", "value": "vim", "confidence": 0.9, "source": "they said so"}
            return Completion(Message.assistant(json.dumps({"facts": [fact]})), stop_reason="stop")
        return await super().complete(request)


@asynccontextmanager
async def serving(root: Path, data: Path, settings: str) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    (root / "agentd.yaml").write_text(settings)
    daemon = Daemon(root / "agents", data, reload_interval=60, providers={"main": Responder()})
    await daemon.start()
    transport = httpx.ASGITransport(app=create_app(daemon))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            yield daemon, client
    finally:
        await daemon.shutdown()


async def post(client: httpx.AsyncClient, agent: str, conversation: str, text: str) -> dict[str, Any]:
    body = {"conversation_id": conversation, "text": text, "user_id": "ana"}
    r = await client.post(f"/agents/{agent}/messages", json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    r = await client.get(path, params=params)
    assert r.status_code == 200, (path, r.text)
    return r.json()


async def views(client: httpx.AsyncClient, before: float | None = None) -> dict[str, Any]:
    """What the API shows of every agent: conversations, transcripts, inspectors, runs, audit trails."""
    seen: dict[str, Any] = {}
    for agent in AGENTS:
        listed = (await get(client, f"/agents/{agent}/conversations", limit=100))["conversations"]
        keys = sorted(c["conversation_key"] for c in listed)
        audit = (await get(client, "/audit", agent=agent, limit=1000))["events"]
        seen[agent] = {
            "conversations": listed,
            "transcripts": {k: await get(client, f"/agents/{agent}/conversations/{k}") for k in keys},
            "inspected": {k: await get(client, f"/agents/{agent}/conversations/{k}/memory") for k in keys},
            "runs": (await get(client, f"/agents/{agent}/runs", limit=1000))["runs"],
            "audit": [
                e for e in audit if before is None or datetime.fromisoformat(e["ts"]).timestamp() < before
            ],
            "approvals": (await get(client, f"/agents/{agent}/approvals"))["approvals"],
        }
    return seen


def without_ids(value: Any) -> Any:
    """The view with the numbers each store gives its own rows taken out (threads, audit events,
    episodes: the copy gives them new ones) and the clock (an approval's time left); everything else
    must be the same."""
    if isinstance(value, dict):
        return {
            k: re.sub(r":\d+$", ":#", v)
            if k == "id" and isinstance(v, str)
            else without_ids(v)  # (audit: agent:n)
            for k, v in value.items()
            if k not in ("thread_id", "thread", "expires_in_s") and not (k == "id" and isinstance(v, int))
        }
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return value


def recalled(inspected: dict[str, Any]) -> list[dict[str, Any]]:
    [layer] = [layer for layer in inspected["layers"] if layer.get("kind") == "episodic"]
    episodes: list[dict[str, Any]] = layer["last_recall"]["episodes"]
    return episodes


def used_ids(server: PostgresServer, url: str) -> None:
    with connect(url) as conn:
        migrate(conn)
    for table in ("threads", "summaries", "episodes", "audit"):
        server.psql(f"SELECT setval('agentd.{table}_id_seq', 1000)", database=url.rsplit("/", 1)[1])


def copy(root: Path, url: str, *more: str) -> int:
    return main(
        ["store", "copy", "--to", url, "--agents", str(root / "agents"), "--data", str(root / "data"), *more]
    )


async def test_a_folder_moves_to_postgresql_and_a_daemon_there_serves_it_all(
    tmp_path: Path, postgres_server: PostgresServer, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agents").mkdir()
    for name, text in AGENTS.items():
        (tmp_path / "agents" / f"{name}.yaml").write_text(text)
    async with serving(tmp_path, tmp_path / "data", "embedder: hash/256\n") as (daemon, client):
        for agent, talk in TALKS.items():
            for conversation, text in talk:
                await post(client, agent, conversation, text)
                assert await daemon.agent(agent).drain(10)  # type: ignore[union-attr]
        delivered = InboundEvent(
            "full", "webhook:c4", "delivered once", "webhook", user_id="ana", event_id="e-1"
        )
        assert not (await daemon.agent("full").handle(delivered)).duplicate  # type: ignore[union-attr]
        before = await views(client)
    assert before["full"]["transcripts"]["webhook:c1"]["summary"]  # (compacted)
    assert recalled(before["episodic"]["inspected"]["webhook:e2"])
    [pending] = before["asker"]["approvals"]

    # The database has given out ids before (as one with other agents has): no copied row keeps its own.
    await asyncio.to_thread(used_ids, postgres_server, postgres_url)
    # one agent first, then all
    assert await asyncio.to_thread(copy, tmp_path, postgres_url, "full") == 0
    assert capsys.readouterr().out.startswith("full: copied ")
    assert await asyncio.to_thread(copy, tmp_path, postgres_url) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^full: nothing new: all \d+ rows already there, verified$", out, re.M), out
    for agent in [*AGENTS.keys() - {"full"}, "_daemon"]:
        assert re.search(rf"^{agent}: copied \d+ rows, 0 already there; every table verified", out, re.M), out
        assert f"{agent}: copying into postgresql://127.0.0.1:" in err
    assert re.search(
        r"^  episodic: episodes +4 in the file: 4 copied, 0 already there; verified 4 \(sha256 ", err, re.M
    )
    assert f"8 of 8 agent(s) into postgresql://127.0.0.1:{postgres_url.split(':')[-1].split('/')[0]}/" in out

    assert await asyncio.to_thread(copy, tmp_path, postgres_url) == 0  # again: nothing twice
    out, _ = capsys.readouterr()
    assert all(line.split(": ", 1)[1].startswith("nothing new: all ") for line in out.splitlines()[:-1]), out
    assert out.splitlines()[-1].endswith(": 0 rows copied")

    shutil.rmtree(tmp_path / "data")  # whatever the daemon on PostgreSQL shows came from the database
    cut = time.time()  # (the daemon below audits its own start: loaded, after this)
    settings = f"embedder: hash/256\nstore: {{url: '{postgres_url}'}}\n"
    async with serving(tmp_path, tmp_path / "data", settings) as (daemon, client):
        after = await views(client, before=cut)
        for agent in AGENTS:
            for part in before[agent]:
                assert without_ids(after[agent][part]) == without_ids(before[agent][part]), (agent, part)
        # what refers to a copied row names its new id: the episodes of a recall
        last = recalled(after["episodic"]["inspected"]["webhook:e2"])
        found = await daemon.agent("episodic").state.store.read(EpisodesById([e["id"] for e in last]))  # type: ignore[union-attr]
        assert last and [found[e["id"]].text for e in last] == [e["text"] for e in last]
        # but an audit event is never rewritten (its hash covers its data): /reset's names the file's
        # thread, as it was written, and every event keeps its seq and hashes (the views above compared them)
        [reset] = [e for e in after["full"]["audit"] if e["action"] == "reset"]
        assert reset == next(e for e in before["full"]["audit"] if e["action"] == "reset") | {
            "id": reset["id"]
        }
        assert reset["seq"] and reset["hash"]

        # recall works on the copy, from the database's own index and full-text search
        answer = await post(client, "episodic", "e3", "Where is the spare key for the shed?")
        assert "some recalled earlier exchanges" in answer["reply"]
        shown = await get(client, "/agents/episodic/conversations/webhook:e3/memory")
        assert any("green flowerpot" in e["text"] for e in recalled(shown))

        # the pending approval of the SQLite daemon is answered here, into its copied thread
        [thread] = [c["thread_id"] for c in after["asker"]["conversations"]]
        paused = await daemon.agent("asker").state.store.read(ApprovalById(pending["id"]))  # type: ignore[union-attr]
        assert paused is not None and paused.state is not None and paused.state["run"]["thread_id"] == thread
        decided = await post(client, "asker", "a", f"/approve {pending['id']}")
        assert "Remembered pet." in decided["reply"], decided
        transcript = await get(client, "/agents/asker/conversations/webhook:a")
        assert len(transcript["messages"]) > len(before["asker"]["transcripts"]["webhook:a"]["messages"])
        runs = await daemon.agent("asker").state.store.read(Runs(None, 100))  # type: ignore[union-attr]
        assert {r["thread_id"] for r in runs if r["trigger"] == "message"} == {thread}

        # a transcript goes on where it stopped; the delivery seen on SQLite is not answered twice
        await post(client, "full", "c1", "still here?")
        transcript = await get(client, "/agents/full/conversations/webhook:c1")
        assert transcript["messages"][-1]["parts"][0]["text"].endswith("You said: still here?")
        assert (await daemon.agent("full").handle(delivered)).duplicate  # type: ignore[union-attr]

        # a new thread's id comes after every copied one (the sequences moved past them)
        await post(client, "full", "c9", "new here")
        listed = (await get(client, "/agents/full/conversations", limit=100))["conversations"]
        new = next(c["thread_id"] for c in listed if c["conversation_key"] == "webhook:c9")
        assert new > max(c["thread_id"] for c in listed if c["conversation_key"] != "webhook:c9")
