"""Provider faults seen through the whole engine, over real HTTP to a fake server.

Whatever the provider does, the person gets a short error reply, the run is
recorded as an error naming provider and model, and nothing stored is lost.
"""

from __future__ import annotations

import httpx
import pytest

from agentd.engine.agent import Agent
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.openai import OpenAIProvider
from agentd.store.queries import ActiveThread
from testkit.fake_llm import FakeLLM
from tests.support import Harness, say

pytestmark = pytest.mark.both_stores  # each test runs on SQLite files and on PostgreSQL

SPEC = "memory: {scope: thread, persistent: true}\nmodel: fake/gpt-test\n"


async def agent_on(harness: Harness, provider: object) -> Agent:
    return await harness.agent(SPEC, providers={"fake": provider})


def openai(fake: FakeLLM, client: httpx.AsyncClient, **kw: object) -> OpenAIProvider:
    options: dict = {"timeout_s": 5.0, "max_retries": 2, "retry_base_s": 0.01, **kw}
    return OpenAIProvider(
        name="fake", kind="openai", client=client, base_url=fake.openai_base_url, api_key="sk-test", **options
    )


async def transcript(agent: Agent) -> list[str]:
    thread = await agent.state.store.read(ActiveThread("webhook:c1"))
    return [m.message.text for m in thread.messages]


async def last_run(agent: Agent) -> tuple[str, str | None]:
    [run] = await agent.runs(limit=1)  # the newest
    return run["status"], run["error"]


async def test_tool_calls_and_usage_over_the_openai_wire(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent = await agent_on(harness, openai(fake, client))
    fake.reply(tool_calls=[("remember", {"key": "city", "value": "Lisbon"})], usage=(120, 9))
    fake.reply("Saved.", usage=(150, 3))
    reply = await say(agent)("I live in Lisbon")
    assert reply.text == "Saved." and reply.error is None
    second = fake.requests[1].json
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "Remembered city."
    assert second["messages"][-2]["tool_calls"][0]["id"] == tool_message["tool_call_id"]
    run = (await agent.runs(limit=1000))[0]
    assert (run["input_tokens"], run["output_tokens"], run["tokens_estimated"], run["model_calls"]) == (
        270,
        12,
        False,
        2,
    )
    assert agent.state.persistent.keys() == ["city"]


async def test_tool_calls_over_the_anthropic_wire(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    provider = AnthropicProvider(
        name="fake", client=client, base_url=fake.anthropic_base_url, api_key="k", retry_base_s=0.01
    )
    agent = await agent_on(harness, provider)
    fake.reply(tool_calls=[("list_memories", {})], usage=(40, 2))
    fake.reply("You have nothing saved.", usage=(60, 5))
    assert (await say(agent)("what do you know?")).text == "You have nothing saved."
    await say(agent)("and now?")  # history with tool_use/tool_result replays on the Anthropic wire
    assert fake.requests[-1].path == "/v1/messages"
    assert fake.requests[-1].json["system"] and fake.requests[-1].headers["x-api-key"] == "k"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        (lambda f: f.fail(401), "API key was refused"),
        (lambda f: f.fail(404), "not found"),
        (lambda f: [f.fail(429, retry_after=0) for _ in range(3)], "429"),
        (lambda f: [f.fail(500) for _ in range(3)], "500"),
        (lambda f: f.malformed(), "cannot read"),
    ],
    ids=["401", "404-model", "429", "500", "malformed"],
)
async def test_provider_errors_lose_nothing(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, script: object, expect: str
) -> None:
    agent = await agent_on(harness, openai(fake, client))
    await say(agent)("first")
    script(fake)  # type: ignore[operator]
    reply = await say(agent)("second")
    assert reply.error == "provider_error"
    assert "could not reach the model" in reply.text and len(reply.text) < 600
    status, error = await last_run(agent)
    assert status == "error" and "fake" in error and "gpt-test" in error and expect in error
    assert await transcript(agent) == ["first", "fake reply to: first", "second"]
    assert (await say(agent)("third")).text == "fake reply to: third"  # and it carries on


async def test_timeout_is_an_error_reply(harness: Harness, fake: FakeLLM, client: httpx.AsyncClient) -> None:
    agent = await agent_on(harness, openai(fake, client, timeout_s=0.3, max_retries=0))
    fake.hang(2.0)
    reply = await say(agent)("hello?")
    assert reply.error == "provider_error"
    status, error = await last_run(agent)
    assert status == "error" and "timed out" in error
    assert await transcript(agent) == ["hello?"]


async def test_429_then_success_retries_transparently(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent = await agent_on(harness, openai(fake, client))
    fake.fail(429, retry_after=0)
    fake.reply("finally", usage=(5, 1))
    assert (await say(agent)("hi")).text == "finally"
    assert await last_run(agent) == ("ok", None)


async def test_missing_key_names_the_variable(
    harness: Harness, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = OpenAIProvider(name="openai", kind="openai", client=client)
    agent = await agent_on(harness, provider)
    reply = await say(agent)("hi")
    assert "OPENAI_API_KEY" in reply.text and reply.error == "provider_error"
    assert await last_run(agent) == (
        "error",
        "provider openai (model gpt-test): no API key: set OPENAI_API_KEY or providers.openai.api_key in agentd.yaml",
    )
