"""`?stream=true` on the webhook (and the REPL route): Server-Sent Events from a daemon served on loopback.

httpx streams the response as any client would; the model is the fake OpenAI
server, streaming slowly where the test needs time to act mid-answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.daemon import Daemon
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import daemon_on_loopback, sse_events

AGENT = (
    "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"
)
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient]]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    async with (
        daemon_on_loopback(tmp_path, {"assistant": AGENT}, settings) as (daemon, url),
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=10, trust_env=False) as client,
    ):
        yield daemon, client


async def streamed(
    client: httpx.AsyncClient, text: str, path: str = "/agents/assistant/messages", **body: Any
) -> list[tuple[str, Any]]:
    """Every event of one streamed answer, as (event, decoded data)."""
    payload = (
        {"conversation_id": "c1", "text": text, **body}
        if path.endswith("messages")
        else {"text": text, **body}
    )
    async with client.stream("POST", path, params={"stream": "true"}, json=payload) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return [(e.event, json.loads(e.data)) async for e in sse_events(response)]


async def test_deltas_then_the_reply_and_the_turn_stored_as_usual(
    served: tuple[Daemon, httpx.AsyncClient], fake: FakeLLM
) -> None:
    _, client = served
    fake.reply("Lisbon is lovely.", pieces=["Lis", "bon is ", "lovely."])

    events = await streamed(client, "tell me")

    assert events[:3] == [
        ("delta", {"text": "Lis"}),
        ("delta", {"text": "bon is "}),
        ("delta", {"text": "lovely."}),
    ]
    kind, reply = events[3]
    assert kind == "reply" and len(events) == 4
    assert reply["reply"] == "Lisbon is lovely." and reply["error"] is None
    assert reply["conversation_key"] == "webhook:c1" and reply["run_id"]
    seen = (await client.get("/agents/assistant/conversations/webhook:c1")).json()
    assert [m["parts"][0]["text"] for m in seen["messages"]] == ["tell me", "Lisbon is lovely."]


async def test_text_before_a_tool_call_is_followed_by_a_restart(
    served: tuple[Daemon, httpx.AsyncClient], fake: FakeLLM
) -> None:
    _, client = served
    fake.reply("One moment. ", tool_calls=[("remember", {"key": "city", "value": "Lisbon"})])
    fake.reply("Saved.")

    events = await streamed(client, "I live in Lisbon")

    assert [e for e, _ in events] == ["delta", "delta", "restart", "delta", "reply"]
    assert events[-1][1]["reply"] == "Saved."


async def test_a_stream_broken_mid_way_ends_with_the_error_reply(
    served: tuple[Daemon, httpx.AsyncClient], fake: FakeLLM
) -> None:
    _, client = served
    fake.reply("one two three four", break_after=2)

    events = await streamed(client, "count")

    # issue 19: the delta shown stays (no restart); the reply keeps it and says the failure after it
    assert [e for e, _ in events] == ["delta", "reply"]
    assert events[-1][1]["error"] == "provider_error"
    assert events[-1][1]["reply"].startswith("one \n\n(The answer broke off")


async def test_a_client_that_disconnects_mid_stream_loses_nothing(
    served: tuple[Daemon, httpx.AsyncClient], fake: FakeLLM
) -> None:
    daemon, client = served
    words = [f"w{i} " for i in range(8)]
    fake.reply("".join(words), pieces=words, delay=0.15)

    async with client.stream(
        "POST",
        "/agents/assistant/messages",
        params={"stream": "true"},
        json={"conversation_id": "c1", "text": "go"},
    ) as response:
        first = await anext(aiter(sse_events(response)))
        assert (first.event, json.loads(first.data)) == ("delta", {"text": "w0 "})
    # gone after the first piece; the turn goes on without its client
    agent = daemon.agent("assistant")
    assert agent is not None and agent.in_flight == 1
    await wait_until(lambda: agent.in_flight == 0, "the abandoned turn to finish", timeout=10)
    [run] = (await client.get("/agents/assistant/runs")).json()["runs"]
    assert run["status"] == "ok"
    seen = (await client.get("/agents/assistant/conversations/webhook:c1")).json()
    assert [m["parts"][0]["text"] for m in seen["messages"]] == ["go", "".join(words)]


async def test_a_command_streams_no_text_only_its_reply(served: tuple[Daemon, httpx.AsyncClient]) -> None:
    _, client = served
    events = await streamed(client, "/help")
    assert [e for e, _ in events] == ["reply"] and "/compact" in events[0][1]["reply"]


async def test_the_repl_route_streams_too(served: tuple[Daemon, httpx.AsyncClient], fake: FakeLLM) -> None:
    _, client = served
    fake.reply("Hi there.", pieces=["Hi ", "there."])
    events = await streamed(client, "hello", path="/agents/assistant/repl", session="s1")
    assert events == [
        ("delta", {"text": "Hi "}),
        ("delta", {"text": "there."}),
        (
            "reply",
            {
                "reply": "Hi there.",
                "run_id": events[-1][1]["run_id"],
                "conversation_key": "repl:s1",
                "error": None,
                "approval": None,  # the id of a tool call waiting for a person, when the run paused
                "files": [],  # what the run's tools made, read at GET /agents/{agent}/media/{sha256}
            },
        ),
    ]


async def test_bad_input_is_refused_before_any_stream_starts(
    served: tuple[Daemon, httpx.AsyncClient],
) -> None:
    _, client = served
    url = "/agents/assistant/messages"
    bad = await client.post(url, params={"stream": "true"}, content=b"{not json")
    assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]
    unknown = await client.post(
        "/agents/nobody/messages", params={"stream": "true"}, json={"conversation_id": "c", "text": "x"}
    )
    assert unknown.status_code == 404
    not_a_flag = await client.post(
        url, params={"stream": "maybe"}, json={"conversation_id": "c", "text": "x"}
    )
    assert not_a_flag.status_code == 422 and not_a_flag.json()["detail"][0]["field"] == "query.stream"
    no_token = await client.post(
        url,
        params={"stream": "true"},
        json={"conversation_id": "c", "text": "x"},
        headers={"Authorization": ""},
    )
    assert no_token.status_code == 401


async def test_the_openapi_document_says_the_route_can_stream(
    served: tuple[Daemon, httpx.AsyncClient],
) -> None:
    _, client = served
    doc = (await client.get("/openapi.json")).json()
    route = doc["paths"]["/agents/{agent}/messages"]["post"]
    assert "text/event-stream" in route["responses"]["200"]["content"]
    assert any(p["name"] == "stream" for p in route["parameters"])
