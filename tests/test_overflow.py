"""Context overflow (issue 19, section 2): recovered over real HTTP to the fakes, as the real APIs refuse.

Each test asserts what is stored afterwards (runs, audit events, the transcript and its summary),
not only the reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentd.engine.agent import Agent
from agentd.errors import CONTEXT_OVERFLOW
from agentd.memory.compaction import SUMMARY_INSTRUCTIONS, render_for_summary
from agentd.memory.pieces import budget_chars, pieces_of
from agentd.providers import windows
from agentd.providers.http import status_reason
from agentd.store.queries import ActiveThread
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback
from tests.test_fallbacks import Clock, Heard, agent_on, say

GPT = """\
model: {name: gpt/mini}
memory: {scope: thread}
channels: {webhook: {}}
"""
CLAUDE = """\
model: {name: claude/sonnet, context_window: 400}
memory: {scope: thread}
channels: {webhook: {}}
"""


@pytest.fixture(autouse=True)
def fresh_windows() -> Iterator[None]:
    windows.forget_learned()
    yield
    windows.forget_learned()


def settings(fake: FakeLLM) -> dict[str, Any]:
    return {
        "gpt": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0},
        "claude": {
            "kind": "anthropic",
            "base_url": fake.anthropic_base_url,
            "api_key": "k",
            "max_retries": 0,
        },
    }


async def runs(agent: Agent) -> list[tuple[str, str]]:
    return [(r["trigger"], r["status"]) for r in await agent.runs("webhook:c", limit=50)]


async def audit(agent: Agent, kind: str) -> list[dict[str, Any]]:
    return [{"action": e["action"], **e["data"]} for e in await agent.audit_events(kind=kind)]


async def thread(agent: Agent) -> tuple[str | None, list[str]]:
    stored = await agent.state.store.read(ActiveThread("webhook:c"))
    return stored.summary, [m.message.text for m in stored.messages]


def test_each_servers_overflow_is_recognised() -> None:
    """llama.cpp's and Ollama's words beside OpenAI's, vLLM's and Anthropic's; and the windows they name."""
    llama = {
        "error": {
            "code": 400,
            "message": "request (4476 tokens) exceeds the available context size (4096 tokens)",
            "type": "exceed_context_size_error",
        }
    }
    ollama = {
        "error": {"message": "the input length exceeds the context length", "type": "invalid_request_error"}
    }
    vllm = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, you requested 8203 tokens"
        }
    }
    said = "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length"
    anthropic = {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
    for body in (llama, ollama, vllm, anthropic):
        assert status_reason(400, body) == CONTEXT_OVERFLOW
    assert windows.window_from_error(said) == 200000
    assert windows.window_from_error(llama["error"]["message"]) == 4096
    assert windows.window_from_error(vllm["error"]["message"]) == 8192
    assert windows.window_from_error("prompt is too long: 215000 tokens > 200000 maximum") == 200000
    assert windows.window_from_error(ollama["error"]["message"]) is None
    assert windows.window_of("anthropic/claude-sonnet-4-5") == 200_000
    assert windows.window_of("openai/gpt-4.1-mini", 5000) == 5000


@pytest.mark.parametrize("server", ["api", "llama.cpp", "ollama"])
async def test_an_overflow_on_the_chat_call_compacts_and_the_retry_answers(
    tmp_path: Path, server: str
) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            fake.reply("A")
            fake.reply("B")
            await say(agent, "one")
            await say(agent, "two")
            fake.overflow(tokens=5000, window=4000, server=server)
            fake.reply("SUMMARY")
            fake.reply("Answered.")
            reply = await say(agent, "three")
            assert reply.error is None and reply.text == "Answered."
            assert await runs(agent) == [
                ("message", "ok"),
                ("message", "ok"),
                ("message", "ok"),  # runs by start: the turn's run began before its compaction
                ("compaction", "ok"),
            ]
            [overflow] = await audit(agent, "model")
            assert overflow["action"] == "overflow" and overflow["trigger"] == "overflow"
            assert overflow["compaction"] == "ok" and overflow["compacted_messages"] == 4
            [compaction] = await audit(agent, "compaction")
            assert compaction["action"] == "ok" and compaction["reason"] == "overflow"
            assert await thread(agent) == ("SUMMARY", ["three", "Answered."])
            # the error taught the window (Ollama's names none)
            assert windows.window_of("gpt/mini") == (None if server == "ollama" else 4000)


async def test_an_overflow_on_the_compaction_call_summarises_in_pieces(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            long = ["x" * 60 + f" line {i}\n" for i in range(8)]
            for text in ("first " + "".join(long), "second " + "".join(long)):
                fake.reply("ok")
                await say(agent, text)
            before = await agent.state.store.read(ActiveThread("webhook:c"))
            pieces = pieces_of(
                render_for_summary(None, before.messages), budget_chars(300, SUMMARY_INSTRUCTIONS) or 0
            )
            assert len(pieces) > 1
            fake.overflow(tokens=5000, window=4000)  # the chat call
            fake.overflow(tokens=900, window=300)  # the compaction call: the summariser's window is small
            for i in range(len(pieces)):
                fake.reply(f"S{i}")
            fake.reply("ALL")
            fake.reply("Answered.")
            reply = await say(agent, "third")
            assert reply.text == "Answered."
            summary_requests = [r for r in fake.requests if r.path == "/v1/chat/completions"][
                -len(pieces) - 2 : -1
            ]
            assert all(
                len(str(r.json["messages"])) < 300 * 4 for r in summary_requests
            )  # each fitted the window
            trail = await runs(agent)
            assert trail[2] == ("message", "ok")
            assert trail[3:] == [("compaction", "error")] + [("compaction", "ok")] * (len(pieces) + 1)
            [compaction] = await audit(agent, "compaction")
            assert compaction["reason"] == "overflow" and compaction["calls"] == len(pieces) + 1
            assert await thread(agent) == ("ALL", ["third", "Answered."])


async def test_a_message_larger_than_the_window_is_told_kept_and_the_next_message_works(
    tmp_path: Path,
) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), CLAUDE) as agent:
            fake.reply("Hello.")
            await say(agent, "hi")
            huge = "word " * 800  # about 1000 tokens; the window is 400
            asked = len(fake.requests)
            reply = await say(agent, huge)
            assert reply.error == "too_large" and "too long for this model" in reply.text
            assert "400 tokens" in reply.text and "saved" in reply.text
            assert len(fake.requests) == asked  # nothing sent that could only be refused
            assert await thread(agent) == (None, ["hi", "Hello.", huge])  # kept
            # the next message: the huge one is compacted away (in pieces that fit), then answered
            budget = budget_chars(400, SUMMARY_INSTRUCTIONS) or 0
            stored = await agent.state.store.read(ActiveThread("webhook:c"))
            pieces = pieces_of(render_for_summary(None, stored.messages), budget)
            for i in range(len(pieces)):
                fake.reply(f"S{i}")
            fake.reply("SUMMARY")
            fake.reply("Fine.")
            reply = await say(agent, "short question")
            assert reply.error is None and reply.text == "Fine."
            assert await thread(agent) == ("SUMMARY", ["short question", "Fine."])
            trail = await runs(agent)
            assert trail[:3] == [("message", "ok"), ("message", "error"), ("message", "ok")]
            assert trail[3:] == [("compaction", "ok")] * (len(pieces) + 1)
            [event] = await audit(agent, "model")
            # before sending: keeping the last two turns left nothing to compact, so all were
            assert event["trigger"] == "window" and event["attempt"] == 2 and event["compaction"] == "ok"


async def test_anthropics_overflow_is_recovered_and_its_window_learned(tmp_path: Path) -> None:
    spec = CLAUDE.replace(", context_window: 400", "")
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), spec) as agent:
            for text in ("one", "two"):
                fake.reply("ok")
                await say(agent, text)
            fake.overflow(tokens=5000, window=4000)  # "prompt is too long: 5000 tokens > 4000 maximum"
            fake.reply("SUMMARY")
            fake.reply("Answered.")
            assert (await say(agent, "three")).text == "Answered."
            assert windows.window_of("claude/sonnet") == 4000
            [event] = await audit(agent, "model")
            assert event["trigger"] == "overflow" and "prompt is too long" in event["error"]
            assert await thread(agent) == ("SUMMARY", ["three", "Answered."])
            assert [t for t, _ in await runs(agent)].count("compaction") == 1


async def test_a_growing_conversation_is_compacted_before_it_would_exceed_the_window(tmp_path: Path) -> None:
    """No overflow error and no reported tokens past compact_at_tokens: the estimate alone compacts."""
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), CLAUDE) as agent:
            for i in range(3):  # ~130 tokens a turn; the window is 400
                fake.reply("ok " * 10)
                await say(agent, f"turn {i} " + "word " * 80)
            assert await audit(agent, "model") == []
            fake.reply("SUMMARY")
            fake.reply("Answered.")
            asked = len(fake.requests)
            assert (await say(agent, "next " + "word " * 80)).text == "Answered."
            assert len(fake.requests) == asked + 2  # the summary, then the chat call: nothing refused
            [event] = await audit(agent, "model")
            assert event["trigger"] == "window" and event["attempt"] == 1 and event["window"] == 400
            assert event["estimated_tokens"] > 400
            [compaction] = await audit(agent, "compaction")
            assert compaction["reason"] == "window" and compaction["messages"] == 2  # the last two turns kept
            summary, texts = await thread(agent)
            assert summary == "SUMMARY" and len(texts) == 6
            last_chat = fake.requests[-1].json
            assert "SUMMARY" in str(last_chat["system"])


async def test_recoveries_are_bounded_and_the_person_is_told(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            for text in ("one", "two", "three"):
                fake.reply("ok")
                await say(agent, text)
            for summary in ("S1", "S2"):  # each retry overflows again (the estimate is far off)
                fake.overflow(tokens=5000, window=4000)
                fake.reply(summary)
            fake.overflow(tokens=5000, window=4000)
            reply = await say(agent, "four")
            assert reply.error == "provider_error" and "context window" in reply.text
            events = await audit(agent, "model")
            assert [e["attempt"] for e in events] == [1, 2]  # two recoveries, then the failure is said
            trail = await runs(agent)
            assert trail.count(("compaction", "ok")) == 2 and ("message", "error") in trail
            assert await thread(agent) == ("S2", ["four"])  # kept, after everything before it was compacted
            fake.reply("Fine.")
            assert (await say(agent, "five")).text == "Fine."


async def test_a_streamed_turn_recovers_from_an_overflow_before_any_word(tmp_path: Path) -> None:
    """The overflow comes before the stream starts: nothing was shown, the retry streams the answer."""
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), GPT) as agent:
            for text in ("one", "two"):
                fake.reply("ok")
                await say(agent, text)
            fake.overflow(tokens=5000, window=4000)
            fake.reply("SUMMARY")
            fake.reply("Streamed answer.")
            heard = Heard()
            reply = await say(agent, "three", heard)
            assert (
                reply.text == "Streamed answer." and "".join(p for p in heard.log if p != "|") == reply.text
            )
            assert await thread(agent) == ("SUMMARY", ["three", "Streamed answer."])
            [event] = await audit(agent, "model")
            assert event["trigger"] == "overflow"


async def test_the_openai_endpoint_refuses_a_message_larger_than_the_window_as_openai_does(
    tmp_path: Path,
) -> None:
    with FakeLLM() as fake:
        config = (
            f"providers: {{claude: {{kind: anthropic, base_url: '{fake.anthropic_base_url}', api_key: k,"
            " max_retries: 0}}\nhttp: {token: t}\n"
        )
        async with daemon_on_loopback(tmp_path, {"bot": CLAUDE}, config) as (daemon, url):
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="t", max_retries=3) as client:
                huge = "word " * 800
                with pytest.raises(openai.BadRequestError) as refused:
                    await client.chat.completions.create(
                        model="bot", user="ana", messages=[{"role": "user", "content": huge}]
                    )
                assert (
                    refused.value.code == "context_length_exceeded" and "400 tokens" in refused.value.message
                )
                assert fake.requests == []  # nothing sent that could only be refused, and no retry
                agent = daemon.agent("bot")
                assert agent is not None
                stored = await agent.state.store.read(ActiveThread("openai:ana"))
                assert [m.message.text for m in stored.messages] == [huge]  # kept
                budget = budget_chars(400, SUMMARY_INSTRUCTIONS) or 0
                for i in range(len(pieces_of(render_for_summary(None, stored.messages), budget))):
                    fake.reply(f"S{i}")
                fake.reply("SUMMARY")
                fake.reply("Fine.")
                answer = await client.chat.completions.create(
                    model="bot", user="ana", messages=[{"role": "user", "content": "short"}]
                )
                assert answer.choices[0].message.content == "Fine."


WINDOWED = """\
model: {name: gpt/mini}
memory: {scope: thread, strategy: {kind: window, messages: 20}}
channels: {webhook: {}}
"""


@pytest.mark.parametrize("server", ["api", "ollama"])
async def test_a_memory_that_does_not_compact_leaves_its_oldest_turns_out_of_the_retry(
    tmp_path: Path, server: str
) -> None:
    """A window memory has no compaction: the refused request is sent again without its oldest
    turns (starting at a person's message), nothing stored is dropped, and the next turn reads the
    window as before."""
    with FakeLLM() as fake:
        async with agent_on(tmp_path, settings(fake), Clock(), WINDOWED) as agent:
            for text in ("one " + "x" * 400, "two " + "y" * 400, "three " + "z" * 400):
                fake.reply("ok")
                await say(agent, text)
            fake.overflow(tokens=5000, window=4000, server=server)
            fake.reply("Answered.")
            reply = await say(agent, "four")
            assert reply.error is None and reply.text == "Answered."
            refused, retried = (r.json["messages"] for r in fake.requests[-2:])
            assert len(retried) < len(refused)
            assert retried[0]["role"] == "user"  # a turn starts whole (no purpose: no system message)
            assert retried[-1]["content"] == "four" and retried == refused[len(refused) - len(retried) :]
            [overflow] = await audit(agent, "model")
            assert overflow["recovery"] == "left_out" and overflow["trigger"] == "overflow"
            assert (
                overflow["left_out_messages"] == len(refused) - len(retried)
                and overflow["model"] == "gpt/mini"
            )
            assert await runs(agent) == [("message", "ok")] * 4  # no compaction: nothing to compact
            _, stored = await thread(agent)
            assert len(stored) == 8 and stored[0].startswith("one ")  # nothing stored was dropped
            fake.reply("Next.")
            await say(agent, "five")
            assert len(fake.requests[-1].json["messages"]) == len(refused) + 2  # the window as before (+ 2)


async def test_each_recovery_is_counted_in_the_metrics_by_model(tmp_path: Path) -> None:
    with FakeLLM() as fake:
        config = f"providers: {{gpt: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        async with daemon_on_loopback(tmp_path, {"bot": WINDOWED}, config) as (_daemon, url):
            async with httpx.AsyncClient(base_url=url, trust_env=False) as api:
                for text in ("one", "two"):
                    fake.reply("ok")
                    await api.post("/agents/bot/messages", json={"conversation_id": "c", "text": text})
                fake.overflow(server="ollama")
                fake.reply("Answered.")
                sent = await api.post("/agents/bot/messages", json={"conversation_id": "c", "text": "three"})
                assert sent.json()["reply"] == "Answered."
                metrics = (await api.get("/metrics")).text
    counted = 'agentd_context_overflows_total{agent="bot",model="gpt/mini",recovery="left_out",trigger="overflow"} 1.0'
    assert counted in metrics
