"""Several daemons on one PostgreSQL database, through the engine: what a person would notice.

Each agent below is built by the one constructor on its own `Resources` (its own backend: threads,
connections, listener, heartbeat), so two agents named `bot` on the same database are two daemons
serving the same agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.config.http_store import StoreSpec
from agentd.config.models import DaemonSpec
from agentd.daemon import Daemon
from agentd.engine.agent import Agent
from agentd.errors import LeaseLost
from agentd.events import InboundEvent, Reply
from agentd.http.app import create_app
from agentd.providers.base import Completion, CompletionRequest
from agentd.providers.embedders import HashEmbedder
from agentd.store.queries import ActiveThread, Runs
from testkit.postgres import PostgresServer
from testkit.scripted import ScriptedProvider
from tests.memory.test_episodic import recalled_section
from tests.support import Harness

KEY = "webhook:c1"
THREAD = "memory: {scope: thread, persistent: true}\nmodel: main/m\npurpose: Be brief.\n"


@pytest.fixture
async def shared(tmp_path: Path, postgres_url: str) -> Any:
    h = Harness(tmp_path / "data", store_url=postgres_url)
    yield h
    await h.close()


async def daemon(harness: Harness, yaml: str = THREAD, **kw: Any) -> tuple[Agent, ScriptedProvider]:
    """Agent `bot` served by one more daemon."""
    model = ScriptedProvider("main")
    providers = {"main": model, **kw.pop("providers", {})}
    return await harness.agent(yaml, "bot", providers=providers, **kw), model


def say(agent: Agent, text: str, **kw: Any) -> Any:
    return agent.handle(InboundEvent("bot", kw.pop("key", KEY), text, "webhook", user_id="u1", **kw))


def texts(request: CompletionRequest) -> list[str]:
    return [m.text for m in request.messages]


class Held:
    """A model whose answer waits until the test lets it go (a slow model call)."""

    name = "held"

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.go = asyncio.Event()

    async def complete(self, request: CompletionRequest) -> Completion:
        self.called.set()
        await self.go.wait()
        return await ScriptedProvider().complete(request)


async def test_each_turn_sees_every_earlier_turn_whichever_daemon_took_it(shared: Harness) -> None:
    (a, model_a), (b, model_b) = await daemon(shared), await daemon(shared)
    await say(a, "one")
    await say(b, "two")
    await say(a, "three")  # a's cached thread misses b's turn: it catches up at the claim
    await say(b, "four")
    assert texts(model_b.requests[0]) == ["one", "default reply to: one", "two"]
    assert texts(model_a.requests[1])[-3:] == ["two", "default reply to: two", "three"]
    assert len(texts(model_b.requests[1])) == 7
    thread = await a.state.store.read(ActiveThread(KEY))
    assert [m.seq for m in thread.messages] == list(range(1, 9))
    daemons = {r["daemon"] for r in await a.runs()}
    assert len(daemons) == 2  # every run records the daemon that ran it


async def test_what_a_daemon_shows_of_a_conversation_includes_the_other_daemons_turns(
    shared: Harness,
) -> None:
    """The inspector, /status and the conversation route take no claim, yet never show a stale cached copy."""
    (a, _), (b, _) = await daemon(shared), await daemon(shared)
    await say(a, "one")  # a holds the thread in memory from here
    await say(b, "two")
    await b.state.persistent.remember("city", "Lisbon", conversation_key=KEY, run_id=None)
    shown = await a.next_prompt(KEY)
    assert [m["parts"][0]["text"] for m in shown["messages"]][-2:] == ["two", "default reply to: two"]
    assert "- city" in shown["system"]
    assert (await a.status_of(KEY))["memory_keys"] == ["city"]
    await say(b, "/new")
    assert (await a.next_prompt(KEY))["messages"] == []


async def test_a_new_thread_on_one_daemon_is_the_others_too(shared: Harness) -> None:
    (a, _), (b, model_b) = await daemon(shared), await daemon(shared)
    await say(a, "before")
    await say(b, "hello")
    await say(a, "/new")
    await say(b, "fresh")
    assert texts(model_b.requests[-1]) == ["fresh"]


async def test_memories_one_daemon_keeps_show_in_the_others_prompt(shared: Harness) -> None:
    (a, _), (b, model_b) = await daemon(shared), await daemon(shared)
    await say(b, "hi")
    assert "Keys you already have" not in model_b.requests[-1].system
    await a.state.persistent.remember("city", "Lisbon", conversation_key=KEY, run_id=None)
    await say(b, "where do I live?")
    assert "- city" in model_b.requests[-1].system
    await a.state.persistent.forget("city", conversation_key=KEY, run_id=None)
    await say(b, "and now?")
    assert "- city" not in model_b.requests[-1].system


async def test_a_delivery_two_daemons_get_is_answered_once(shared: Harness) -> None:
    (a, model_a), (b, model_b) = await daemon(shared), await daemon(shared)
    replies: list[Reply] = await asyncio.gather(
        say(a, "hello", event_id="m1"), say(b, "hello", event_id="m1")
    )
    assert sorted(r.duplicate for r in replies) == [False, True]
    assert len(model_a.requests) + len(model_b.requests) == 1
    assert [r["trigger"] for r in await a.runs()] == ["message"]
    again = await say(b, "hello", event_id="m1")  # and a later redelivery, to either
    assert again.duplicate


async def test_a_daemon_that_stalls_past_its_lease_loses_the_turn_cleanly(shared: Harness) -> None:
    slow = DaemonSpec(store=StoreSpec(lease_s=1.0))
    held = Held()
    a, _ = await daemon(shared, THREAD.replace("main/m", "held/m"), providers={"held": held}, settings=slow)
    b, model_b = await daemon(shared, settings=slow)
    await say(b, "first")
    stuck = asyncio.ensure_future(say(a, "lost in a stall"))
    await held.called.wait()
    a_backend = a.state.store._backend  # type: ignore[attr-defined]
    await a_backend.claims.close()  # a hangs: it stops renewing its lease
    reply = await say(b, "second")  # b takes the conversation over once a's lease has run out
    assert reply.error is None and texts(model_b.requests[-1]) == [
        "first",
        "default reply to: first",
        "second",
    ]
    held.go.set()
    with pytest.raises(LeaseLost, match="another daemon took this conversation over"):
        await stuck
    thread = await b.state.store.read(ActiveThread(KEY))
    assert [m.message.text for m in thread.messages if m.message.role == "user"] == ["first", "second"]
    assert len(await b.state.store.read(Runs(KEY))) == 2  # nothing of a's turn, not even its run


async def test_an_episode_one_daemon_writes_is_recalled_by_the_other(shared: Harness) -> None:
    # vectors only: an episode missing from b's in-memory index cannot be found by its keywords instead
    yaml = "purpose: P\nmodel: main/m\nmemory: {strategy: {kind: episodic, vector_weight: 1}}\n"
    (a, _), (b, model_b) = (
        await daemon(shared, yaml, embedder=HashEmbedder(256)),
        await daemon(shared, yaml, embedder=HashEmbedder(256)),
    )
    await say(b, "My car is a blue Volvo estate.", key="webhook:b")
    assert await b.drain(10)  # (episodes are stored after the reply)
    await say(b, "What colour is my car?", key="webhook:b2")  # b's index of u1 is loaded now
    assert "Volvo" in recalled_section(model_b)
    await say(a, "The spare key for the shed is under the green flowerpot.", key="webhook:a")
    assert await a.drain(10)
    await say(b, "Where is the spare key for the shed?", key="webhook:b3")
    assert "green flowerpot" in recalled_section(model_b)


async def test_the_webhook_answers_503_when_the_lease_was_lost(
    tmp_path: Path, postgres_server: PostgresServer, postgres_url: str
) -> None:
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "bot.yaml").write_text("model: held/m\nchannels: {webhook: {}}\nmemory: {scope: thread}\n")
    (tmp_path / "agentd.yaml").write_text(f"store: {{url: '{postgres_url}'}}\n")
    held = Held()
    daemon = Daemon(folder, tmp_path / "data", reload_interval=60, providers={"held": held})
    await daemon.start()
    try:
        assert daemon.daemon_store is not None and daemon.daemon_store.label.endswith("#_daemon")
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
        )
        async with client:
            post = asyncio.ensure_future(
                client.post("/agents/bot/messages", json={"conversation_id": "c1", "text": "hello"})
            )
            await held.called.wait()
            # what a takeover does to a stalled holder's ticket (tests/test_postgres_claims.py does it for real)
            database = postgres_url.rsplit("/", 1)[1]
            postgres_server.psql("DELETE FROM agentd.claim_tickets", database=database)
            held.go.set()
            answer = await post
        assert answer.status_code == 503
        assert "another daemon took this conversation over" in answer.json()["error"]
        assert answer.json()["error"].endswith("the message was not answered: send it again")
        assert not (tmp_path / "data" / "bot.sqlite").exists()
    finally:
        await daemon.shutdown()
