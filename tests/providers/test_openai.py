"""OpenAIProvider over real HTTP against FakeLLM's Chat Completions endpoint."""

import asyncio

import httpx
import pytest

from agentd.errors import CredentialError, OperatorError, ProviderError
from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart
from agentd.providers.base import CompletionRequest, ToolSpec, Usage
from agentd.providers.openai import OpenAIProvider
from testkit.fake_llm import FakeLLM

LOOKUP = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def provider(fake: FakeLLM, client: httpx.AsyncClient, **overrides) -> OpenAIProvider:
    options = dict(
        name="openai",
        kind="openai",
        client=client,
        base_url=fake.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        retry_base_s=0.001,
    )
    options.update(overrides)
    return OpenAIProvider(**options)


def ask(text: str, model: str = "gpt-test", **kwargs) -> CompletionRequest:
    return CompletionRequest(model=model, system="You are terse.", messages=[Message.user(text)], **kwargs)


async def test_plain_text_reply_with_usage_and_the_request_on_the_wire(fake, client):
    fake.reply("hello there", usage=(12, 3))

    completion = await provider(fake, client).complete(ask("hi"))

    assert completion.message.role == "assistant"
    assert completion.message.text == "hello there"
    assert completion.usage == Usage(input_tokens=12, output_tokens=3)
    assert completion.stop_reason == "stop"
    [sent] = fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
    }


async def test_tools_temperature_and_max_tokens_are_sent_only_when_set(fake, client):
    request = ask("hi", tools=[LOOKUP], temperature=0.2, max_output_tokens=50)
    await provider(fake, client).complete(request)
    await provider(fake, client).complete(
        CompletionRequest(model="m", system="", messages=[Message.user("x")])
    )

    first, second = (r.json for r in fake.requests)
    assert first["tools"] == [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Look a word up.", "parameters": LOOKUP.parameters},
        }
    ]
    assert first["temperature"] == 0.2
    assert first["max_tokens"] == 50
    # an empty system prompt is left out, and so are unset options
    assert second == {"model": "m", "messages": [{"role": "user", "content": "x"}]}


async def test_a_reply_without_usage_has_usage_none(fake, client):
    fake.reply("no counts", usage=None)
    completion = await provider(fake, client).complete(ask("hi"))
    assert completion.message.text == "no counts"
    assert completion.usage is None


async def test_the_default_reply_echoes_the_last_user_text(fake, client):
    completion = await provider(fake, client).complete(ask("what time is it"))
    assert completion.message.text == "fake reply to: what time is it"
    assert completion.usage is not None and completion.usage.input_tokens > 0


async def test_tool_call_round_trip(fake, client):
    fake.reply(tool_calls=[("lookup", {"q": "otter"})], usage=(20, 5))
    fake.reply("An otter is a mammal.", usage=(40, 6))
    llm = provider(fake, client)
    user = Message.user("what is an otter?")

    first = await llm.complete(ask("what is an otter?", tools=[LOOKUP]))

    assert first.stop_reason == "tool_calls"
    [call] = first.message.tool_calls
    assert call.name == "lookup" and call.arguments == {"q": "otter"}
    result = Message(role="tool", parts=(ToolResultPart(call_id=call.id, name="lookup", content="a mammal"),))
    second = await llm.complete(
        CompletionRequest(
            model="gpt-test", system="You are terse.", messages=[user, first.message, result], tools=[LOOKUP]
        )
    )

    assert second.message.text == "An otter is a mammal."
    sent = fake.requests[1].json["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "lookup", "arguments": '{"q": "otter"}'}}
        ],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": call.id, "content": "a mammal"}


async def test_each_tool_result_becomes_its_own_tool_message_and_errors_are_labelled(fake, client):
    assistant = Message(
        role="assistant",
        parts=(
            TextPart(text="Checking both."),
            ToolCallPart(id="c1", name="lookup", arguments={"q": "a"}),
            ToolCallPart(id="c2", name="lookup", arguments={"q": "b"}),
        ),
    )
    results = Message(
        role="tool",
        parts=(
            ToolResultPart(call_id="c1", name="lookup", content="found a"),
            ToolResultPart(call_id="c2", name="lookup", content="no such word", is_error=True),
        ),
    )
    await provider(fake, client).complete(
        CompletionRequest(model="m", system="", messages=[Message.user("a and b?"), assistant, results])
    )

    sent = fake.requests[0].json["messages"]
    assert sent[1]["content"] == "Checking both."
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["c1", "c2"]
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "found a"},
        {"role": "tool", "tool_call_id": "c2", "content": "error: no such word"},
    ]


async def test_a_part_the_wire_cannot_carry_is_refused_before_sending(fake, client):
    odd = Message(role="user", parts=(ToolCallPart(id="c1", name="lookup", arguments={}),))
    with pytest.raises(ProviderError, match="cannot send a tool_call part in a user message"):
        await provider(fake, client).complete(CompletionRequest(model="m", system="", messages=[odd]))
    assert fake.requests == []


async def test_a_refused_key_names_provider_model_and_the_env_var_without_retrying(client):
    with FakeLLM(api_key="sk-right") as fake:
        llm = provider(fake, client, name="work", api_key="sk-wrong", max_retries=3)
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask("hi", model="gpt-4.1-mini"))
        assert len(fake.requests) == 1
    error = caught.value
    assert error.status == 401 and error.provider == "work" and error.model == "gpt-4.1-mini"
    assert not error.unreachable
    message = str(error)
    assert "provider work (model gpt-4.1-mini)" in message
    assert "the API key was refused" in message
    assert "OPENAI_API_KEY or providers.work.api_key in agentd.yaml" in message


async def test_an_unknown_model_says_to_check_the_model_name(client):
    with FakeLLM(models={"gpt-real"}) as fake:
        llm = provider(fake, client, max_retries=3)
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask("hi", model="gpt-typo"))
        assert len(fake.requests) == 1
    assert caught.value.status == 404
    assert "model or endpoint not found" in str(caught.value)
    assert "check the model name in the agent file and base_url" in str(caught.value)
    assert "gpt-typo" in str(caught.value)


async def test_a_bad_request_carries_the_providers_own_message(fake, client):
    fake.fail(400, {"error": {"message": "This model's maximum context length is 8192 tokens."}})
    with pytest.raises(ProviderError, match="maximum context length is 8192 tokens") as caught:
        await provider(fake, client, max_retries=3).complete(ask("hi"))
    assert caught.value.status == 400
    assert len(fake.requests) == 1


async def test_missing_api_key_is_a_clear_error_and_nothing_is_sent(fake, client, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(
        CredentialError, match=r"no API key: set OPENAI_API_KEY or providers\.openai\.api_key"
    ) as caught:
        await provider(fake, client, api_key=None).complete(ask("hi"))
    assert isinstance(caught.value, OperatorError)  # the operator must act; retrying cannot help
    assert fake.requests == []


async def test_the_key_may_come_from_the_environment(fake, client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    await provider(fake, client, api_key=None).complete(ask("hi"))
    assert fake.requests[0].headers["authorization"] == "Bearer sk-from-env"


async def test_ollama_needs_no_key_and_never_gets_the_openai_one(fake, client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-ollama")
    llm = provider(fake, client, name="ollama", kind="ollama", api_key=None)
    completion = await llm.complete(ask("hi", model="llama3.2"))
    assert completion.message.text == "fake reply to: hi"
    assert "authorization" not in fake.requests[0].headers


def test_default_base_urls_per_kind(client):
    assert OpenAIProvider(name="o", kind="openai", client=client).base_url == "https://api.openai.com/v1"
    assert OpenAIProvider(name="l", kind="ollama", client=client).base_url == "http://localhost:11434/v1"
    with pytest.raises(ValueError, match="anthropic"):
        OpenAIProvider(name="a", kind="anthropic", client=client)


async def test_a_body_that_is_not_json_is_reported_not_retried(fake, client):
    fake.malformed()
    with pytest.raises(ProviderError, match="returned a response agentd cannot read") as caught:
        await provider(fake, client, max_retries=3).complete(ask("hi"))
    assert "not JSON" in str(caught.value) and "502 upstream hiccup" in str(caught.value)
    assert len(fake.requests) == 1


async def test_json_of_the_wrong_shape_is_reported(fake, client):
    fake.raw({"object": "list", "data": []})
    with pytest.raises(ProviderError, match="returned a response agentd cannot read: no `choices`"):
        await provider(fake, client).complete(ask("hi"))


async def test_malformed_tool_call_arguments(fake, client):
    fake.raw(
        {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "lookup", "arguments": '{"q": '},
                            }
                        ],
                    },
                }
            ]
        }
    )
    with pytest.raises(ProviderError, match="malformed tool call arguments for 'lookup'"):
        await provider(fake, client).complete(ask("hi"))


async def test_in_flight_calls_are_bounded_per_provider(fake, client):
    for _ in range(4):
        fake.hang(0.4)
    llm = provider(fake, client, max_concurrency=2, timeout_s=10)

    replies = await asyncio.gather(*(llm.complete(ask(f"q{i}")) for i in range(4)))

    assert sorted(r.message.text for r in replies) == [f"fake reply to: q{i}" for i in range(4)]
    arrivals = [r.at for r in fake.requests]
    # the third call could only start once one of the first two had finished
    assert arrivals[2] - arrivals[0] >= 0.35
