"""Streamed answers over real HTTP against FakeLLM: OpenAI-compatible and Ollama chunks, Anthropic events."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest

from agentd.errors import ProviderError
from agentd.messages import Message, ToolCallPart
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.base import (
    Completion,
    CompletionRequest,
    StreamingProvider,
    TextDelta,
    ToolSpec,
    Usage,
)
from agentd.providers.offline import OfflineProvider
from agentd.providers.openai import OpenAIProvider
from testkit.fake_llm import FakeLLM

LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object", "properties": {"q": {"type": "string"}}})
REQUEST = CompletionRequest(model="m", system="Be terse.", messages=[Message.user("hi")], tools=[LOOKUP])


def openai(fake: FakeLLM, client: httpx.AsyncClient, kind: str = "openai", **options: Any) -> OpenAIProvider:
    return OpenAIProvider(
        name=kind,
        kind=kind,
        client=client,
        base_url=fake.openai_base_url,
        api_key="sk-test" if kind == "openai" else None,
        retry_base_s=0.001,
        **options,
    )


def anthropic(fake: FakeLLM, client: httpx.AsyncClient, **options: Any) -> AnthropicProvider:
    return AnthropicProvider(
        name="anthropic",
        client=client,
        base_url=fake.anthropic_base_url,
        api_key="k",
        retry_base_s=0.001,
        **options,
    )


async def collect(
    provider: StreamingProvider, request: CompletionRequest = REQUEST
) -> tuple[list[str], Completion]:
    deltas: list[str] = []
    async with contextlib.aclosing(provider.stream(request)) as stream:
        async for item in stream:
            if isinstance(item, TextDelta):
                deltas.append(item.text)
            else:
                return deltas, item
    raise AssertionError("the stream ended without a Completion")


PROVIDERS = ["openai", "ollama", "anthropic"]


def build(which: str, fake: FakeLLM, client: httpx.AsyncClient, **options: Any) -> StreamingProvider:
    return (
        anthropic(fake, client, **options) if which == "anthropic" else openai(fake, client, which, **options)
    )


@pytest.mark.parametrize("which", PROVIDERS)
async def test_text_arrives_in_pieces_and_ends_as_the_same_completion_as_without_streaming(
    which: str, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    provider = build(which, fake, client)
    fake.reply("Lisbon is lovely", usage=(40, 4), pieces=["Lis", "bon is", " lovely"])
    fake.reply("Lisbon is lovely", usage=(40, 4))

    deltas, streamed = await collect(provider)
    plain = await provider.complete(REQUEST)

    assert deltas == ["Lis", "bon is", " lovely"]
    assert streamed.message == plain.message
    assert streamed.usage == plain.usage == Usage(40, 4)
    assert streamed.stop_reason == plain.stop_reason
    wire = fake.requests[0].json
    assert wire["stream"] is True
    if which != "anthropic":
        assert wire["stream_options"] == {"include_usage": True}  # else no usage comes back
    assert "stream" not in fake.requests[1].json


@pytest.mark.parametrize("which", PROVIDERS)
async def test_tool_calls_are_assembled_from_their_pieces(
    which: str, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    fake.reply(
        "Let me look.",
        tool_calls=[
            ("lookup", {"q": "Lisbon", "lang": "pt"}, "call_a"),
            ("lookup", {"q": "Porto"}, "call_b"),
        ],
    )

    deltas, completion = await collect(build(which, fake, client))

    assert "".join(deltas) == "Let me look."
    assert completion.message.tool_calls == [
        ToolCallPart(id="call_a", name="lookup", arguments={"q": "Lisbon", "lang": "pt"}),
        ToolCallPart(id="call_b", name="lookup", arguments={"q": "Porto"}),
    ]
    assert completion.stop_reason in ("tool_calls", "tool_use")


@pytest.mark.parametrize("which", PROVIDERS)
async def test_a_stream_broken_mid_way_is_a_provider_error_not_half_an_answer(
    which: str, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    fake.reply("one two three four", break_after=4)  # some text has gone out, then the connection drops

    deltas: list[str] = []
    with pytest.raises(ProviderError, match="broke off before the answer was complete"):
        async with contextlib.aclosing(build(which, fake, client).stream(REQUEST)) as stream:
            async for item in stream:
                assert isinstance(item, TextDelta), "a broken stream must never end in a Completion"
                deltas.append(item.text)
    assert deltas and "".join(deltas) != "one two three four"
    assert len(fake.requests) == 1  # text had been handed out: not retried


@pytest.mark.parametrize("which", PROVIDERS)
async def test_failures_before_the_first_byte_are_retried(
    which: str, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    fake.fail(503)
    fake.fail(429, retry_after=0)
    fake.reply("made it")

    deltas, completion = await collect(build(which, fake, client, max_retries=2))

    assert "".join(deltas) == completion.message.text == "made it"
    assert len(fake.requests) == 3


async def test_an_error_event_mid_stream_says_what_the_server_said(
    fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    events = (
        'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3}}}\n\n'
        'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    fake.raw(events, content_type="text/event-stream")
    with pytest.raises(ProviderError, match="Overloaded"):
        await collect(anthropic(fake, client))


async def test_a_stream_that_ends_early_without_breaking_is_incomplete(
    fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    chunk = '{"id":"x","choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}'
    fake.raw(f"data: {chunk}\n\n", content_type="text/event-stream")
    with pytest.raises(ProviderError, match="ended before the answer was complete"):
        await collect(openai(fake, client))


async def test_a_json_answer_to_a_stream_request_is_refused_clearly(
    fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    fake.raw({"choices": []})
    with pytest.raises(ProviderError, match="expected an event stream, got application/json"):
        await collect(openai(fake, client))


async def test_the_offline_model_streams_its_reply_word_by_word() -> None:
    deltas, completion = await collect(
        OfflineProvider(), CompletionRequest("m", "", [Message.user("hello there")])
    )
    assert len(deltas) > 3
    assert "".join(deltas) == completion.message.text
    assert completion.message.text.endswith("You said: hello there")
