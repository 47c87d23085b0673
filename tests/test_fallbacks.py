"""Fallback chains (issue 19, section 1): real providers' failures, over real HTTP to the fakes.

The primary is an Anthropic model on one fake server, its fallback an OpenAI model on another, so
each test can tell which one was asked. The breakers' clock is the test's: a pause ends when the
test says so, with no sleeping. Each test asserts what is stored (runs, audit, transcript).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.config.models import DaemonSpec
from agentd.daemon import Daemon
from agentd.daemon.resources import Resources
from agentd.engine.agent import Agent
from agentd.engine.breakers import Breakers
from agentd.events import InboundEvent, Reply
from agentd.http.app import create_app
from agentd.messages import Message
from agentd.store.queries import ActiveThread
from testkit.fake_llm import FakeLLM
from testkit.sinks import Heard
from tests.support import make_spec

AGENT = """\
model:
  name: claude/sonnet
  fallbacks: [gpt/mini]
memory: {scope: thread, persistent: true}
channels: {webhook: {}}
"""
PAUSE_S = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def providers(claude: str, gpt: str, *, claude_key: str | None = "k", retries: int = 0) -> dict[str, Any]:
    claude_spec: dict[str, Any] = {"kind": "anthropic", "base_url": claude, "max_retries": retries}
    if claude_key is not None:
        claude_spec["api_key"] = claude_key
    return {
        "claude": claude_spec,
        "gpt": {"kind": "openai", "base_url": gpt, "api_key": "k", "max_retries": 0},
    }


def closed_port_url() -> str:
    """A loopback URL where nothing listens: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def agent_on(
    tmp_path: Path, settings: dict[str, Any], clock: Clock, spec: str = AGENT, store_url: str | None = None
) -> AsyncIterator[Agent]:
    """The agent `spec` on SQLite files in tmp_path (or in the PostgreSQL database `store_url`)."""
    breakers = Breakers(first_pause_s=PAUSE_S, clock=clock)
    store = {"store": {"url": store_url}} if store_url else {}
    daemon_spec = DaemonSpec.model_validate({"providers": settings, **store})
    async with Resources(daemon_spec, tmp_path, breakers=breakers) as resources:
        agent = await resources.open_agent(make_spec(spec))
        try:
            yield agent
        finally:
            await agent.drain(5)
            await agent.close()


async def say(agent: Agent, text: str, sink: Heard | None = None) -> Reply:
    event = InboundEvent("bot", "webhook:c", text, "webhook", user_id="ana")
    return await agent.handle(event, sink=sink) if sink is not None else await agent.handle(event)


async def message_runs(agent: Agent) -> list[tuple[str, str]]:
    """(model, status) of each message run, oldest first."""
    runs = await agent.runs("webhook:c", limit=50)
    return [(r["model"], r["status"]) for r in runs if r["trigger"] == "message"]  # oldest first


async def fallbacks(agent: Agent) -> list[dict[str, Any]]:
    events = await agent.audit_events(kind="model")
    return [e["data"] for e in events if e["action"] == "fallback"]  # oldest first


async def transcript(agent: Agent) -> list[Message]:
    thread = await agent.state.store.read(ActiveThread("webhook:c"))
    return [m.message for m in thread.messages]


def store_url(store_backend: str, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("postgres_url") if store_backend == "postgres" else None


def chat_requests(fake: FakeLLM) -> int:
    return sum(1 for r in fake.requests if r.path in ("/v1/messages", "/v1/chat/completions"))


async def test_a_429_with_retry_after_is_retried_on_the_primary_not_passed_on(tmp_path: Path) -> None:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url, retries=1)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            claude.fail(429, retry_after=0.2)
            claude.reply("Hello from Claude.")
            reply = await say(agent, "hi")
            assert reply.text == "Hello from Claude." and reply.error is None
            first, second = claude.requests
            assert second.at - first.at >= 0.18  # Retry-After was honoured
            assert chat_requests(gpt) == 0
            assert await message_runs(agent) == [("claude/sonnet", "ok")]
            assert await fallbacks(agent) == []
            assert [m.text for m in await transcript(agent)] == ["hi", "Hello from Claude."]


@pytest.mark.both_stores
@pytest.mark.parametrize(
    ("failure", "reason"),
    [(500, "server_error"), (529, "overloaded"), (429, "rate_limited")],  # 429: retries spent (0 here)
)
async def test_a_dead_primary_falls_back_is_skipped_while_paused_and_used_again_once_back(
    tmp_path: Path, failure: int, reason: str, store_backend: str, request: pytest.FixtureRequest
) -> None:
    clock = Clock()
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        url = store_url(store_backend, request)
        async with agent_on(tmp_path, settings, clock, store_url=url) as agent:
            claude.down(failure)
            gpt.reply("GPT here.")
            reply = await say(agent, "one")
            assert reply.text == "GPT here." and reply.error is None
            assert chat_requests(claude) == 1  # one attempt: max_retries 0
            [step] = await fallbacks(agent)
            assert (step["from"], step["to"], step["reason"]) == ("claude/sonnet", "gpt/mini", reason)
            assert str(failure) in step["error"]

            # the next turn: the primary's breaker is open, it gets no request at all
            gpt.reply("GPT again.")
            assert (await say(agent, "two")).text == "GPT again."
            assert chat_requests(claude) == 1
            skipped = (await fallbacks(agent))[-1]
            assert (skipped["from"], skipped["reason"]) == ("claude/sonnet", "paused")
            status = (await say(agent, "/status")).text
            assert "Model claude/sonnet: skipped for 30 s after 1 failure" in status
            assert "\nFallbacks: gpt/mini\n" in status
            facts = await agent.status_of("webhook:c")
            assert facts["model_chain"][0]["skipped"] is True and facts["model_chain"][1]["skipped"] is False

            # the primary is back and its pause is over: it answers again
            claude.up()
            clock.now += PAUSE_S + 1
            claude.reply("Claude is back.")
            assert (await say(agent, "three")).text == "Claude is back."
            assert chat_requests(claude) == 2 and chat_requests(gpt) == 2
            assert await message_runs(agent) == [
                ("gpt/mini", "ok"),
                ("gpt/mini", "ok"),
                ("claude/sonnet", "ok"),
            ]
            assert [m.text for m in await transcript(agent)] == [
                "one",
                "GPT here.",
                "two",
                "GPT again.",
                "three",
                "Claude is back.",
            ]
            assert (await agent.status_of("webhook:c"))["model_chain"][0]["state"] == "closed"


async def test_a_refused_connection_falls_back(tmp_path: Path) -> None:
    with FakeLLM() as gpt:
        settings = providers(closed_port_url(), gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            gpt.reply("Nobody home there; here I am.")
            assert (await say(agent, "hello?")).text == "Nobody home there; here I am."
            [step] = await fallbacks(agent)
            assert step["reason"] == "connection" and "cannot connect" in step["error"]
            assert await message_runs(agent) == [("gpt/mini", "ok")]


async def test_an_invalid_request_is_not_passed_on_and_the_person_is_told(tmp_path: Path) -> None:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            claude.fail(400, message="messages.0.content: this field is bad")
            reply = await say(agent, "hi")
            assert reply.error == "provider_error" and "this field is bad" in reply.text
            claude.overflow()  # a prompt past the window: recognised, not passed on (recovered: test_overflow)
            claude.overflow()  # the compaction call of the recovery too
            claude.overflow()  # and its one retry, sized by the window that error taught: the person is told
            reply = await say(agent, "and now")
            assert reply.error == "provider_error" and "longer than the model's context window" in reply.text
            assert chat_requests(gpt) == 0
            assert await fallbacks(agent) == []
            assert [s for _, s in await message_runs(agent)] == ["error", "error"]
            assert [m.text for m in await transcript(agent)] == ["hi", "and now"]  # messages kept
            # the request's fault, not the model's: the breaker stays closed and the next turn asks it
            assert (await agent.status_of("webhook:c"))["model_chain"][0]["state"] == "closed"
            claude.reply("Fine now.")
            assert (await say(agent, "again")).text == "Fine now."


async def test_a_missing_or_refused_key_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with FakeLLM(api_key="the-right-key") as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url, claude_key=None)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            gpt.reply("Keyless fallback.")
            assert (await say(agent, "hi")).text == "Keyless fallback."
            assert chat_requests(claude) == 0  # no key: nothing was sent
            [step] = await fallbacks(agent)
            assert step["reason"] == "missing_key" and "ANTHROPIC_API_KEY" in step["error"]
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url, claude_key="wrong")
        async with agent_on(tmp_path / "refused", settings, Clock()) as agent:
            gpt.reply("Refused-key fallback.")
            assert (await say(agent, "hi")).text == "Refused-key fallback."
            assert chat_requests(claude) == 1
            [step] = await fallbacks(agent)
            assert step["reason"] == "auth" and "401" in step["error"]
            assert await message_runs(agent) == [("gpt/mini", "ok")]


@pytest.mark.both_stores
async def test_a_conversation_with_tool_calls_moves_between_providers_intact(
    tmp_path: Path, store_backend: str, request: pytest.FixtureRequest
) -> None:
    clock = Clock()
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        url = store_url(store_backend, request)
        async with agent_on(tmp_path, settings, clock, store_url=url) as agent:
            # turn 1 on Anthropic: a tool call and its result
            claude.reply(tool_calls=[("remember", {"key": "city", "value": "Lisbon"}, "toolu_01")])
            claude.reply("Saved your city.")
            assert (await say(agent, "I live in Lisbon")).text == "Saved your city."

            # turn 2: Anthropic is down; OpenAI gets the history in its own shape, and calls a tool too
            claude.down(529)
            gpt.reply(tool_calls=[("list_memories", {}, "call_02")])
            gpt.reply("You live in Lisbon.")
            assert (await say(agent, "where do I live?")).text == "You live in Lisbon."
            first_gpt = gpt.requests[0].json["messages"]  # the fake refuses unpaired tool messages (400)
            carried = [m for m in first_gpt if m.get("tool_calls")]
            assert carried[0]["tool_calls"][0]["id"] == "toolu_01"
            assert carried[0]["tool_calls"][0]["function"]["name"] == "remember"
            assert [m["tool_call_id"] for m in first_gpt if m["role"] == "tool"] == ["toolu_01"]

            # turn 3: Anthropic is back; it gets OpenAI's tool call and result as tool_use/tool_result
            claude.up()
            clock.now += PAUSE_S + 1
            claude.reply("Still Lisbon.")
            assert (await say(agent, "sure?")).text == "Still Lisbon."
            blocks = [b for m in claude.requests[-1].json["messages"] for b in m["content"]]
            uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            assert uses == results == ["toolu_01", "call_02"]

            assert await message_runs(agent) == [
                ("claude/sonnet", "ok"),
                ("gpt/mini", "ok"),
                ("claude/sonnet", "ok"),
            ]
            roles = [m.role for m in await transcript(agent)]
            assert roles == ["user", "assistant", "tool", "assistant"] * 2 + ["user", "assistant"]
            assert [s["reason"] for s in await fallbacks(agent)] == ["overloaded"]


async def test_the_small_model_falls_back_along_small_fallbacks(tmp_path: Path) -> None:
    spec = """\
model:
  name: claude/sonnet
  fallbacks: [gpt/mini]
  small: claude/haiku
  small_fallbacks: [gpt/nano]
memory: {scope: thread, compact_at_tokens: false}
"""
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock(), spec) as agent:
            for text in ("one", "two", "three"):
                claude.reply(f"answer {text}")
                await say(agent, text)
            claude.down(529)
            gpt.reply("The person counted to three.")
            reply = await say(agent, "/compact")
            assert reply.text.startswith("Compacted"), reply.text
            assert gpt.requests[-1].json["model"] == "nano"  # the small chain, not the main one
            runs = await agent.runs("webhook:c", limit=50)
            [compaction] = [r for r in runs if r["trigger"] == "compaction"]
            assert (compaction["model"], compaction["status"]) == ("gpt/nano", "ok")
            [step] = await fallbacks(agent)
            assert (step["from"], step["to"], step["reason"]) == ("claude/haiku", "gpt/nano", "overloaded")


async def test_a_stream_that_fails_after_its_first_words_is_not_started_over(tmp_path: Path) -> None:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            # message_start, the text block's start, one delta: then the connection drops
            claude.reply("one two three four", break_after=3)
            heard = Heard()
            reply = await say(agent, "count", heard)
            assert heard.log == ["one "]  # shown, and not taken back
            assert reply.error == "provider_error"
            assert reply.text.startswith("one \n\n(The answer broke off here")
            assert chat_requests(gpt) == 0  # no other model starts over
            assert await fallbacks(agent) == []
            [run] = await agent.runs("webhook:c", limit=1)
            assert run["status"] == "error" and "after 4 characters of the reply were shown" in run["error"]
            assert [m.text for m in await transcript(agent)] == ["count"]  # no half answer stored


async def test_a_stream_that_fails_before_any_word_falls_back_and_streams_the_fallback(
    tmp_path: Path,
) -> None:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            claude.fail(529)
            gpt.reply("from the fallback", pieces=["from ", "the ", "fallback"])
            heard = Heard()
            reply = await say(agent, "count", heard)
            assert reply.text == "from the fallback" and heard.log == ["from ", "the ", "fallback"]
            assert gpt.requests[0].json["stream"] is True
            assert [s["reason"] for s in await fallbacks(agent)] == ["overloaded"]
            assert await message_runs(agent) == [("gpt/mini", "ok")]


async def test_when_every_model_of_the_chain_fails_the_person_is_told_and_each_step_is_kept(
    tmp_path: Path,
) -> None:
    with FakeLLM() as claude, FakeLLM() as gpt:
        settings = providers(claude.anthropic_base_url, gpt.openai_base_url)
        async with agent_on(tmp_path, settings, Clock()) as agent:
            claude.down(529)
            gpt.down(503)
            reply = await say(agent, "anyone?")
            assert reply.error == "provider_error" and "could not reach the model" in reply.text
            assert "503" in reply.text  # the last model's failure is the one said
            assert [(s["from"], s["reason"]) for s in await fallbacks(agent)] == [
                ("claude/sonnet", "overloaded")
            ]
            [run] = await agent.runs("webhook:c", limit=1)
            assert run["status"] == "error" and "gpt" in run["error"]
            assert [m.text for m in await transcript(agent)] == ["anyone?"]
            # the next turn: the primary is skipped, the last model is always tried
            gpt.up()
            gpt.reply("Back.")
            assert (await say(agent, "now?")).text == "Back."
            assert chat_requests(claude) == 1


async def test_get_agents_metrics_and_startup_warnings_show_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeLLM() as claude, FakeLLM() as gpt:
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "bot.yaml").write_text(AGENT.replace("[gpt/mini]", "[gpt/mini, spare/x]"))
        (tmp_path / "agentd.yaml").write_text(
            "providers:\n"
            f"  claude: {{kind: anthropic, base_url: '{claude.anthropic_base_url}', api_key: k, max_retries: 0}}\n"
            f"  gpt: {{kind: openai, base_url: '{gpt.openai_base_url}', api_key: k, max_retries: 0}}\n"
            f"  spare: {{kind: openai, base_url: '{gpt.openai_base_url}', max_retries: 0}}\n"
        )
        clock = Clock()
        daemon = Daemon(
            tmp_path / "agents",
            tmp_path / "data",
            reload_interval=60,
            breakers=Breakers(first_pause_s=PAUSE_S, clock=clock),
        )
        async with daemon:
            transport = httpx.ASGITransport(app=create_app(daemon))
            async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
                [listed] = (await client.get("/agents")).json()["agents"]
                # a fallback without a key is found at start, not at the first failure
                assert any("spare" in w and "OPENAI_API_KEY" in w for w in listed["warnings"])
                logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
                assert any("agent bot" in m and "provider spare" in m for m in logged)
                assert [m["model"] for m in listed["models"]] == ["claude/sonnet", "gpt/mini", "spare/x"]
                claude.down(529)
                gpt.reply("fallback answer")
                sent = await client.post("/agents/bot/messages", json={"conversation_id": "c", "text": "hi"})
                assert sent.status_code == 200 and sent.json()["reply"] == "fallback answer"
                [listed] = (await client.get("/agents")).json()["agents"]
                primary = listed["models"][0]
                assert primary["skipped"] is True and primary["state"] == "open"
                assert "529" in primary["last_error"]
                metrics = (await client.get("/metrics")).text
                assert (
                    'agentd_model_fallbacks_total{agent="bot",model="claude/sonnet",reason="overloaded"} 1.0'
                    in metrics
                )
