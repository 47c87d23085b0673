"""Each provider says WHAT failed (ProviderError.reason), from the status and the body as each API
sends them, over real HTTP to the fake; the engine's fallback chain decides from it (issue 19)."""

from __future__ import annotations

import httpx
import pytest

from agentd.engine.model_chain import falls_back
from agentd.errors import CredentialError, ProviderError
from agentd.messages import Message
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.base import CompletionRequest
from agentd.providers.openai import OpenAIProvider
from testkit.fake_llm import FakeLLM

REQUEST = CompletionRequest(model="m", system="", messages=[Message.user("hi")])


def both(
    fake: FakeLLM, client: httpx.AsyncClient, base_url: str | None = None, key: str | None = "k"
) -> list:
    options = {"client": client, "api_key": key, "max_retries": 0, "retry_base_s": 0.001, "timeout_s": 2.0}
    return [
        OpenAIProvider(name="openai", kind="openai", base_url=base_url or fake.openai_base_url, **options),
        AnthropicProvider(name="anthropic", base_url=base_url or fake.anthropic_base_url, **options),
    ]


async def failure(provider: object, request: CompletionRequest = REQUEST) -> ProviderError:
    with pytest.raises(ProviderError) as failed:
        await provider.complete(request)  # type: ignore[attr-defined]
    return failed.value


@pytest.mark.parametrize(
    ("status", "reason", "passes_on"),
    [
        (429, "rate_limited", True),
        (529, "overloaded", True),
        (500, "server_error", True),
        (503, "server_error", True),
        (408, "timeout", True),
        (401, "auth", True),
        (403, "auth", True),
        (404, "not_found", True),
        (400, "invalid_request", False),
        (413, "invalid_request", False),
        (422, "invalid_request", False),
    ],
)
async def test_a_status_in_each_apis_error_shape_is_typed(
    fake: FakeLLM, client: httpx.AsyncClient, status: int, reason: str, passes_on: bool
) -> None:
    for provider in both(fake, client):
        fake.fail(status)
        error = await failure(provider)
        assert (error.status, error.reason, falls_back(error)) == (status, reason, passes_on), provider.name


async def test_the_prompt_past_the_window_is_typed_as_each_api_says_it(
    fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    for provider in both(fake, client):
        fake.overflow()
        error = await failure(provider)
        assert error.reason == "context_overflow" and not falls_back(error), provider.name
        assert "longer than the model's context window" in str(error)
    said = [r.path for r in fake.requests]
    assert said == ["/v1/chat/completions", "/v1/messages"]


async def test_anthropic_overloaded_error_is_overloaded_whatever_the_status(
    fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    _, anthropic = both(fake, client)
    fake.fail(503, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert (await failure(anthropic)).reason == "overloaded"


async def test_unreachable_and_missing_keys_are_typed(
    fake: FakeLLM, client: httpx.AsyncClient, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for provider in both(fake, client, base_url=f"http://127.0.0.1:{closed_port}"):
        error = await failure(provider)
        assert error.reason == "connection" and falls_back(error)
    for provider in both(fake, client):
        fake.hang(5)
        error = await failure(provider)
        assert error.reason == "timeout" and falls_back(error)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for provider in both(fake, client, key=None):
        with pytest.raises(CredentialError) as missing:
            await provider.complete(REQUEST)
        assert missing.value.reason == "missing_key" and falls_back(missing.value)


async def test_an_error_names_the_endpoint_without_its_secrets(
    fake: FakeLLM, client: httpx.AsyncClient, closed_port: int
) -> None:
    """A base_url may carry a key (userinfo, a query): the error, which the person's reply, the run
    and GET /agents show, names the endpoint without it."""
    url = f"http://agentd:pw-s3cret@127.0.0.1:{closed_port}/v1?api-key=q-s3cret"
    for provider in both(fake, client, base_url=url):
        error = await failure(provider)
        assert f"127.0.0.1:{closed_port}/v1" in str(error) and "s3cret" not in str(error), str(error)


async def test_a_stream_broken_off_is_typed(fake: FakeLLM, client: httpx.AsyncClient) -> None:
    for provider in both(fake, client):
        fake.reply("one two three", break_after=3)
        with pytest.raises(ProviderError) as broken:
            async for _ in provider.stream(REQUEST):
                pass
        assert broken.value.reason == "stream_broken", provider.name
