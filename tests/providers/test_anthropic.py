"""AnthropicProvider over real HTTP against FakeLLM's Messages endpoint."""

import httpx
import pytest

from agentd.errors import CredentialError, ProviderError
from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.base import CompletionRequest, ToolSpec, Usage
from testkit.fake_llm import FakeLLM

LOOKUP = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def provider(fake: FakeLLM, client: httpx.AsyncClient, **overrides) -> AnthropicProvider:
    options = dict(
        name="anthropic",
        client=client,
        base_url=fake.url,
        api_key="sk-ant-test",
        max_retries=0,
        retry_base_s=0.001,
    )
    options.update(overrides)
    return AnthropicProvider(**options)


def ask(*messages: Message, model: str = "claude-test", **kwargs) -> CompletionRequest:
    return CompletionRequest(model=model, system="You are terse.", messages=list(messages), **kwargs)


async def test_plain_text_reply_with_usage_and_the_request_on_the_wire(fake, client):
    fake.reply("hello there", usage=(12, 3))

    completion = await provider(fake, client).complete(ask(Message.user("hi")))

    assert completion.message.text == "hello there"
    assert completion.usage == Usage(input_tokens=12, output_tokens=3)
    assert completion.stop_reason == "end_turn"
    [sent] = fake.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json == {
        "model": "claude-test",
        "max_tokens": 1024,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


async def test_tools_temperature_and_max_tokens(fake, client):
    await provider(fake, client).complete(
        ask(Message.user("hi"), tools=[LOOKUP], temperature=0.5, max_output_tokens=77)
    )
    sent = fake.requests[0].json
    assert sent["tools"] == [
        {"name": "lookup", "description": "Look a word up.", "input_schema": LOOKUP.parameters}
    ]
    assert sent["temperature"] == 0.5
    assert sent["max_tokens"] == 77


async def test_a_reply_without_usage_has_usage_none(fake, client):
    fake.reply("no counts", usage=None)
    completion = await provider(fake, client).complete(ask(Message.user("hi")))
    assert completion.usage is None


async def test_cached_input_tokens_count_as_input(fake, client):
    fake.raw(
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "cached"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 200,
                "cache_read_input_tokens": 3000,
                "output_tokens": 4,
            },
        }
    )
    completion = await provider(fake, client).complete(ask(Message.user("hi")))
    assert completion.usage == Usage(input_tokens=3210, output_tokens=4)


async def test_tool_call_round_trip(fake, client):
    fake.reply("Let me look.", tool_calls=[("lookup", {"q": "otter"})], usage=(20, 5))
    fake.reply("An otter is a mammal.", usage=(40, 6))
    llm = provider(fake, client)
    user = Message.user("what is an otter?")

    first = await llm.complete(ask(user, tools=[LOOKUP]))

    assert first.stop_reason == "tool_use"
    assert first.message.text == "Let me look."
    [call] = first.message.tool_calls
    assert call.name == "lookup" and call.arguments == {"q": "otter"}
    result = Message(
        role="tool",
        parts=(ToolResultPart(call_id=call.id, name="lookup", content="not found", is_error=True),),
    )
    second = await llm.complete(ask(user, first.message, result, tools=[LOOKUP]))

    assert second.message.text == "An otter is a mammal."
    sent = fake.requests[1].json["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": call.id, "name": "lookup", "input": {"q": "otter"}},
        ],
    }
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "not found", "is_error": True}
        ],
    }


async def test_consecutive_messages_on_one_wire_role_are_merged(fake, client):
    history = [
        Message.user("first"),
        Message.user("second"),
        Message.assistant("thinking"),
        Message(role="assistant", parts=(ToolCallPart(id="t1", name="lookup", arguments={"q": "x"}),)),
        Message(role="tool", parts=(ToolResultPart(call_id="t1", name="lookup", content="x is y"),)),
        Message.user("and then?"),
        Message(role="assistant", parts=(TextPart(text=""),)),  # an empty reply carries nothing
        Message.user("hello?"),
    ]

    completion = await provider(fake, client).complete(ask(*history))

    # the fake answers 400 to turns that do not alternate, so getting a reply proves the merge
    assert completion.message.text == "fake reply to: hello?"
    assert fake.requests[0].json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "thinking"},
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "x is y", "is_error": False},
                {"type": "text", "text": "and then?"},
                {"type": "text", "text": "hello?"},
            ],
        },
    ]


async def test_the_fake_refuses_turns_that_do_not_alternate(fake, client):
    # The merge test above relies on this: the fake must really enforce alternation.
    response = await client.post(
        fake.url + "/v1/messages",
        json={
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        },
    )
    assert response.status_code == 400
    assert "alternate" in response.json()["error"]["message"]


async def test_a_refused_key_names_the_env_var_and_is_not_retried(client):
    with FakeLLM(api_key="sk-ant-right") as fake:
        llm = provider(fake, client, name="claude", api_key="sk-ant-wrong", max_retries=3)
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask(Message.user("hi"), model="claude-sonnet-4-5"))
        assert len(fake.requests) == 1
    assert caught.value.status == 401
    assert caught.value.provider == "claude" and caught.value.model == "claude-sonnet-4-5"
    assert "ANTHROPIC_API_KEY or providers.claude.api_key in agentd.yaml" in str(caught.value)
    assert "invalid api key" in str(caught.value)  # the server's own words


async def test_an_unknown_model_says_to_check_the_model_name(client):
    with FakeLLM(models={"claude-real"}) as fake:
        with pytest.raises(ProviderError, match="check the model name in the agent file") as caught:
            await provider(fake, client).complete(ask(Message.user("hi"), model="claude-typo"))
    assert caught.value.status == 404


async def test_missing_api_key_is_a_clear_error_and_nothing_is_sent(fake, client, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(
        CredentialError, match=r"no API key: set ANTHROPIC_API_KEY or providers\.anthropic\.api_key"
    ):
        await provider(fake, client, api_key=None).complete(ask(Message.user("hi")))
    assert fake.requests == []


async def test_the_key_may_come_from_the_environment(fake, client, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    await provider(fake, client, api_key=None).complete(ask(Message.user("hi")))
    assert fake.requests[0].headers["x-api-key"] == "sk-ant-env"


async def test_a_part_the_wire_cannot_carry_is_refused_before_sending(fake, client):
    odd = Message(role="tool", parts=(TextPart(text="loose text"),))
    with pytest.raises(ProviderError, match="cannot send a text part in a tool message"):
        await provider(fake, client).complete(ask(Message.user("hi"), odd))
    assert fake.requests == []


async def test_an_unknown_content_block_is_reported(fake, client):
    fake.raw(
        {"type": "message", "role": "assistant", "content": [{"type": "mystery"}], "stop_reason": "end_turn"}
    )
    with pytest.raises(ProviderError, match=r"returned a response agentd cannot read: .*mystery"):
        await provider(fake, client).complete(ask(Message.user("hi")))


async def test_a_body_that_is_not_json_is_reported(fake, client):
    fake.malformed()
    with pytest.raises(ProviderError, match="returned a response agentd cannot read"):
        await provider(fake, client).complete(ask(Message.user("hi")))


def test_default_base_url(client):
    assert AnthropicProvider(name="anthropic", client=client).base_url == "https://api.anthropic.com"
