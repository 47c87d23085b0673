"""The Responses API (`POST /v1/responses`) driven by the official client and the OpenAI Agents SDK (issue 22).

A daemon on loopback whose agent's model is the fake OpenAI server; the client talks to agentd as to
OpenAI. Each test checks what the agent stored, not only what the client read: a continued response is
one conversation, a stateless one keeps nothing, a retried one is stored once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentd.daemon.daemon import Daemon
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback, every_message

ASSISTANT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Daemon, str]]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    async with daemon_on_loopback(tmp_path, {"assistant": ASSISTANT}, settings) as served:
        yield served


def client_of(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)


def said_to_model(fake: FakeLLM) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in fake.requests[-1].json["messages"] if m["role"] != "system"]


async def stored(daemon: Daemon) -> list[dict[str, Any]]:
    agent = daemon.agent("assistant")
    assert agent is not None
    return await every_message(agent)


async def test_a_response_is_continued_by_its_id_as_one_conversation(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    fake.reply("Lisbon is lovely.", usage=(23, 5))
    fake.reply("So is Porto.", usage=(40, 4))
    client = client_of(url)
    first = await client.responses.create(model="assistant", input="Tell me about Lisbon.")
    assert first.output_text == "Lisbon is lovely." and first.status == "completed"
    assert first.usage is not None and (first.usage.input_tokens, first.usage.output_tokens) == (23, 5)
    second = await client.responses.create(
        model="assistant", input="And Porto?", previous_response_id=first.id, instructions="Be brief."
    )
    assert second.output_text == "So is Porto." and second.previous_response_id == first.id
    # the model saw the first exchange: agentd held the history; the instructions reached it for this call
    assert said_to_model(fake) == [
        ("user", "Tell me about Lisbon."),
        ("assistant", "Lisbon is lovely."),
        ("user", "And Porto?"),
    ]
    assert "Be brief." in fake.requests[-1].json["messages"][0]["content"]
    messages = await stored(daemon)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert len({m["thread_id"] for m in messages if "thread_id" in m} or {0}) == 1
    # read back, from the store
    again = await client.responses.retrieve(second.id)
    assert again.output_text == "So is Porto." and again.usage is not None and again.usage.output_tokens == 4


async def test_the_official_stream_gives_every_event_in_order_and_the_final_response(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    fake.reply("Porto too.", pieces=["Porto ", "too."], usage=(31, 3))
    client = client_of(url)
    async with client.responses.stream(
        model="assistant", input=[{"role": "user", "content": "And Porto?"}]
    ) as s:
        kinds = [event.type async for event in s]
        final = await s.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds.count("response.output_text.delta") == 2
    assert final.output_text == "Porto too." and final.usage is not None and final.usage.total_tokens == 34
    assert [m["role"] for m in await stored(daemon)] == ["user", "assistant"]
    assert (await client.responses.retrieve(final.id)).output_text == "Porto too."


async def test_store_false_and_a_history_in_the_input_keep_nothing(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    fake.reply("Four.")
    fake.reply("Yes.")
    client = client_of(url)
    alone = await client.responses.create(model="assistant", input="2+2?", store=False)
    assert alone.output_text == "Four."
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Four."}]},
        {"role": "user", "content": "Sure?"},
    ]
    sure = await client.responses.create(model="assistant", input=history)  # type: ignore[arg-type]
    assert sure.output_text == "Yes."
    assert said_to_model(fake) == [("user", "2+2?"), ("assistant", "Four."), ("user", "Sure?")]
    assert await stored(daemon) == []
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(alone.id)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model="assistant", input="more", previous_response_id=alone.id)
    assert refused.value.code == "previous_response_not_found"


async def test_what_agentd_cannot_do_is_refused_naming_the_parameter(served: tuple[Daemon, str]) -> None:
    _, url = served
    client = client_of(url)
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tools": [tool]}, "tools"),
        ({"background": True}, "background"),
        ({"previous_response_id": "resp_made-up"}, "previous_response_id"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="assistant", input="hi", **extra)
        assert refused.value.param == param, extra
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="no-such-agent", input="hi")
    bad_items = [
        [{"type": "function_call_output", "call_id": "c1", "output": "x"}],
        [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1", "detail": "auto"}]}],
        [{"role": "assistant", "content": "I end it"}],
    ]
    params = ["input", "input[0].content[0].file_id", "input"]  # a part's param is its path, as OpenAI's
    for items, param in zip(bad_items, params, strict=True):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="assistant", input=items)  # type: ignore[arg-type]
        assert refused.value.param == param


async def test_malformed_bodies_are_a_400_in_openais_shape(served: tuple[Daemon, str]) -> None:
    _, url = served
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for body in ({"model": "assistant"}, {"model": "assistant", "input": 5}, {"input": "hi"}, [1]):
            answer = await http.post("/v1/responses", json=body)
            assert answer.status_code == 400, body
            assert answer.json()["error"]["type"] == "invalid_request_error"
        assert (await http.get("/v1/responses/resp_nothing")).status_code == 404


async def test_a_retry_with_the_same_key_is_answered_once_and_stored_once(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    fake.reply("Only once.")
    client = client_of(url)
    headers = {"Idempotency-Key": "resp-retry-1"}
    first = await client.responses.create(model="assistant", input="Hello", extra_headers=headers)
    again = await client.responses.with_raw_response.create(
        model="assistant", input="Hello", extra_headers=headers
    )
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.parse().output_text == first.output_text == "Only once." and again.parse().id == first.id
    assert len(fake.requests) == 1
    assert [m["role"] for m in await stored(daemon)] == ["user", "assistant"]


async def test_an_agents_sdk_agent_runs_against_agentd(served: tuple[Daemon, str], fake: FakeLLM) -> None:
    agents = pytest.importorskip("agents")
    daemon, url = served
    fake.reply("Hello from agentd.", usage=(11, 4))
    fake.reply("Streamed hello.", pieces=["Streamed ", "hello."], usage=(13, 2))
    agents.set_tracing_disabled(True)  # traces would be exported to OpenAI's servers
    model = agents.OpenAIResponsesModel(model="assistant", openai_client=client_of(url))
    agent = agents.Agent(name="Greeter", instructions="Greet the person.", model=model)
    result = await agents.Runner.run(agent, "Hi!")
    assert result.final_output == "Hello from agentd."
    usage = result.context_wrapper.usage
    assert (usage.input_tokens, usage.output_tokens) == (11, 4)
    assert "Greet the person." in fake.requests[0].json["messages"][0]["content"]
    streamed = agents.Runner.run_streamed(agent, "Again!")
    deltas = [
        e.data.delta
        async for e in streamed.stream_events()
        if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"
    ]
    assert "".join(deltas) == "Streamed hello." and streamed.final_output == "Streamed hello."
    # each run of the SDK sent one new message: each is a conversation of its own, kept
    assert [m["role"] for m in await stored(daemon)] == ["user", "assistant", "user", "assistant"]
