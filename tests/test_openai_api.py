"""The OpenAI-compatible endpoint, driven by the official `openai` client against a daemon on loopback.

The agents run on the fake OpenAI server as their model, so the test sees both
ends: what the client gets from agentd, and what agentd sent to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from agentd.daemon import Daemon
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback

ASSISTANT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
OFFLINE = "memory: {scope: thread}\nchannels: {webhook: {}}\n"
NO_HTTP = "purpose: Only on chat platforms.\n"
TOKEN = "s3cret"


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Daemon, str]]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    agents = {"assistant": ASSISTANT, "offline-bot": OFFLINE, "platform-only": NO_HTTP}
    async with daemon_on_loopback(tmp_path, agents, settings) as running:
        yield running


@pytest.fixture
async def client(served: tuple[Daemon, str]) -> AsyncIterator[openai.AsyncOpenAI]:
    _, url = served
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as c:
        yield c


def said_to_model(fake: FakeLLM, n: int = -1) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in fake.requests[n].json["messages"]]


async def test_the_models_are_the_agents_open_to_http(client: openai.AsyncOpenAI) -> None:
    listed = [m.id async for m in client.models.list()]
    assert listed == ["assistant", "offline-bot"]
    assert (await client.models.retrieve("assistant")).owned_by == "agentd"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("platform-only")


async def test_a_stateless_completion_sees_the_messages_sent_and_keeps_nothing_but_its_run(
    client: openai.AsyncOpenAI, fake: FakeLLM, served: tuple[Daemon, str]
) -> None:
    fake.reply("Your name is Ana.", usage=(20, 5))
    completion = await client.chat.completions.create(
        model="assistant",
        messages=[
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "My name is Ana."},
            {"role": "assistant", "content": "Hello Ana."},
            {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]},
        ],
        temperature=0.2,  # accepted; the agent file decides
    )

    assert completion.choices[0].message.content == "Your name is Ana."
    assert completion.choices[0].finish_reason == "stop" and completion.model == "assistant"
    system, *rest = said_to_model(fake)
    assert system[0] == "system" and system[1].startswith("You help.") and system[1].endswith("one sentence.")
    assert rest == [("user", "My name is Ana."), ("assistant", "Hello Ana."), ("user", "What is my name?")]
    daemon, _ = served
    agent = daemon.agent("assistant")
    assert agent is not None
    assert await agent.conversations() == []
    [run] = await agent.runs()
    assert (run["conversation_key"], run["status"], run["input_tokens"]) == ("openai:(stateless)", "ok", 20)
    assert completion.id == f"chatcmpl-{run['id']}"


async def test_a_conversation_named_by_user_keeps_its_history_in_agentd(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    for text in ("I live in Lisbon.", "Where do I live?"):
        await client.chat.completions.create(
            model="assistant",
            user="ana",
            messages=[
                {"role": "user", "content": "ignored: agentd keeps the history"},
                {"role": "user", "content": text},
            ],
        )

    assert said_to_model(fake)[1:] == [
        ("user", "I live in Lisbon."),
        ("assistant", "fake reply to: I live in Lisbon."),
        ("user", "Where do I live?"),
    ]


async def test_a_conversation_named_by_header_and_its_commands(
    client: openai.AsyncOpenAI, served: tuple[Daemon, str]
) -> None:
    named = {"X-Agentd-Conversation": "ticket-7"}
    ask = {"model": "offline-bot", "extra_headers": named}
    await client.chat.completions.create(messages=[{"role": "user", "content": "first"}], **ask)  # type: ignore[call-overload]
    second = await client.chat.completions.create(messages=[{"role": "user", "content": "second"}], **ask)  # type: ignore[call-overload]
    assert "I see 2 earlier messages" in str(second.choices[0].message.content)

    raw = await client.chat.completions.with_raw_response.create(
        messages=[{"role": "user", "content": "/status"}],
        **ask,  # type: ignore[call-overload]
    )
    assert raw.headers["x-agentd-conversation"] == "openai:ticket-7"
    assert "messages" in str(raw.parse().choices[0].message.content).lower()
    daemon, _ = served
    agent = daemon.agent("offline-bot")
    assert agent is not None
    assert [c["conversation_key"] for c in await agent.conversations()] == ["openai:ticket-7"]


async def test_streaming_gives_chunks_that_add_up_to_the_reply(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("Lisbon is lovely.", pieces=["Lis", "bon is ", "lovely."])

    stream = await client.chat.completions.create(
        model="assistant", user="ana", messages=[{"role": "user", "content": "tell me"}], stream=True
    )
    chunks = [c async for c in stream]

    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert pieces == ["Lis", "bon is ", "lovely."]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    again = await client.chat.completions.create(
        model="assistant", user="ana", messages=[{"role": "user", "content": "and?"}]
    )
    assert said_to_model(fake)[-3:] == [
        ("user", "tell me"),
        ("assistant", "Lisbon is lovely."),
        ("user", "and?"),
    ]
    assert again.choices[0].message.content == "fake reply to: and?"


async def test_text_before_a_tool_call_streams_set_apart_from_the_answer(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("One moment.", tool_calls=[("nonexistent_tool", {})])
    fake.reply("Done.")

    stream = await client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "go"}], stream=True
    )
    chunks = [c async for c in stream]

    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "One moment.\n\nDone."


async def test_a_stream_broken_mid_way_raises_in_the_client(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("one two three", break_after=2)
    stream = await client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "go"}], stream=True
    )
    with pytest.raises(openai.APIError, match="could not reach the model"):
        async for _ in stream:
            pass


async def test_a_failed_model_is_a_502_the_client_does_not_retry(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    fake.fail(500)
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=3) as client:
        with pytest.raises(openai.InternalServerError) as failed:
            await client.chat.completions.create(
                model="assistant", user="ana", messages=[{"role": "user", "content": "hi"}]
            )
    assert failed.value.status_code == 502 and "could not reach the model" in failed.value.message
    assert len(fake.requests) == 1  # one model call: the client did not send the message again


@pytest.mark.parametrize(
    ("request_body", "status", "says"),
    [
        ({"model": "nobody", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
        ({"model": "platform-only", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
        ({"model": "assistant", "messages": []}, 400, "messages"),
        ({"model": "assistant", "messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
        ({"model": "assistant", "messages": [{"role": "assistant", "content": "x"}]}, 400, "last message"),
        ({"model": "assistant", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "one answer"),
        (
            {
                "model": "assistant",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            },
            400,
            "own tools",
        ),
        (
            {"model": "assistant", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            400,
            "image_url.url: a string is required",
        ),
        (
            {"model": "assistant", "messages": [{"role": "user", "content": "x"}], "user": "a b"},
            400,
            "without spaces",
        ),
    ],
    ids=["unknown", "no-webhook", "empty", "bad-role", "not-user-last", "n", "tools", "image", "user-space"],
)
async def test_bad_requests_get_openai_errors_with_reasons(
    served: tuple[Daemon, str], request_body: dict[str, object], status: int, says: str
) -> None:
    _, url = served
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        response = await http.post("/v1/chat/completions", json=request_body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"


async def test_malformed_json_and_a_wrong_token(served: tuple[Daemon, str]) -> None:
    _, url = served
    async with httpx.AsyncClient(base_url=url) as http:
        malformed = await http.post(
            "/v1/chat/completions", content=b"{nope", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert malformed.status_code == 400 and "malformed JSON" in malformed.json()["error"]["message"]
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError):
            await stranger.models.list()


async def test_the_openapi_document_describes_the_endpoint(served: tuple[Daemon, str]) -> None:
    _, url = served
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        doc = (await http.get("/openapi.json")).json()  # behind the token like every route but /healthz
    route = doc["paths"]["/v1/chat/completions"]["post"]
    assert "messages" in route["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert "text/event-stream" in route["responses"]["200"]["content"]
    assert "/v1/models" in doc["paths"]


async def test_the_readme_example_runs_as_written(served: tuple[Daemon, str]) -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", readme, flags=re.MULTILINE | re.DOTALL)
    [example] = [block for block in blocks if "openai.OpenAI(" in block]
    _, url = served
    code = example.replace("http://127.0.0.1:8765", url).replace('"the http.token, or anything"', repr(TOKEN))
    printed = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), {})

    await asyncio.to_thread(run)  # a blocking client, off the loop that serves it
    assert printed.getvalue() == "['assistant', 'offline-bot']\nfake reply to: what do you remember?\n"


async def test_a_failed_stateless_call_does_not_say_the_message_is_saved(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.fail(500)
    with pytest.raises(openai.InternalServerError) as stateless:
        await client.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    assert "Nothing was kept" in stateless.value.message and "saved" not in stateless.value.message
    fake.fail(500)
    with pytest.raises(openai.InternalServerError) as named:
        await client.chat.completions.create(
            model="assistant", user="ana", messages=[{"role": "user", "content": "hi"}]
        )
    assert "Your message is saved" in named.value.message


@pytest.mark.parametrize("user", ["ana-✓", "小明", "ana🙂", "a%b"])
async def test_a_user_outside_latin_1_is_answered_and_stored_once(
    served: tuple[Daemon, str], fake: FakeLLM, user: str
) -> None:
    _, url = served
    # the official client retries a 500 twice: a reply that fails after the turn would store it 3 times
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=2) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="assistant", user=user, messages=[{"role": "user", "content": "hi"}]
        )
    assert raw.parse().choices[0].message.content == "fake reply to: hi"
    assert urllib.parse.unquote(raw.headers["x-agentd-conversation"]) == f"openai:{user}"
    raw.headers["x-agentd-conversation"].encode("ascii")
    assert len(fake.requests) == 1
    daemon, _ = served
    agent = daemon.agent("assistant")
    assert agent is not None
    [conversation] = await agent.conversations()
    assert (conversation["conversation_key"], conversation["messages"]) == (f"openai:{user}", 2)


async def test_text_that_is_not_unicode_is_refused_before_the_turn(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    headers = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        for body in (
            b'{"model": "assistant", "user": "ana", "messages": [{"role": "user", "content": "hi \\ud800"}]}',
            b'{"model": "assistant", "user": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}',
        ):
            response = await http.post("/v1/chat/completions", content=body)
            assert response.status_code == 400, response.text
            assert "not Unicode text" in response.json()["error"]["message"]
    assert fake.requests == []
