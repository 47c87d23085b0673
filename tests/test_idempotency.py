"""Idempotency keys over real HTTP: a retried request is answered with the first one's reply and its
message is stored once, on the webhook and on the OpenAI endpoint (driven by the official client,
which retries a timeout by itself), while the first still runs, after it, and after a restart."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from agentd.daemon import Daemon
from agentd.http.app import create_app
from testkit.fake_llm import FakeLLM
from testkit.serving import serve_on_loopback
from tests.support import sse_events

AGENT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def write_folder(root: Path, fake: FakeLLM) -> Path:
    (root / "agents").mkdir(exist_ok=True)
    (root / "agents" / "assistant.yaml").write_text(AGENT)
    (root / "agentd.yaml").write_text(
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    return root / "agents"


class Served:
    def __init__(self, daemon: Daemon, url: str):
        self.daemon, self.url = daemon, url

    async def messages(self, conversation_key: str) -> list[str]:
        async with httpx.AsyncClient(base_url=self.url, headers=AUTH) as http:
            shown = (await http.get(f"/agents/assistant/conversations/{conversation_key}")).json()
        return ["".join(p.get("text", "") for p in m["parts"]) for m in shown["messages"]]


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[Served]:
    daemon = Daemon(write_folder(tmp_path, fake), tmp_path / "data", reload_interval=60)
    await daemon.start()
    try:
        async with serve_on_loopback(create_app(daemon)) as url:
            yield Served(daemon, url)
    finally:
        await daemon.shutdown()


async def post(url: str, body: dict[str, object], key: str | None = None) -> httpx.Response:
    headers = AUTH | ({"Idempotency-Key": key} if key else {})
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        return await http.post("/agents/assistant/messages", json=body)


async def test_a_retry_after_the_first_gets_its_reply_and_stores_nothing(
    served: Served, fake: FakeLLM
) -> None:
    body = {"conversation_id": "t", "text": "hello", "user_id": "ana"}
    first = await post(served.url, body, key="k-1")
    again = await post(served.url, body, key="k-1")
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json() and first.json()["reply"] == "fake reply to: hello"
    assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
    by_field = await post(served.url, {**body, "message_id": "k-1"})  # the key as a field
    assert by_field.json() == first.json()
    assert len(fake.requests) == 1
    assert await served.messages("webhook:t") == ["hello", "fake reply to: hello"]  # was stored 3 times
    other = await post(served.url, body, key="k-2")  # another key is another message
    assert other.status_code == 200 and len(await served.messages("webhook:t")) == 4


async def test_a_retry_while_the_first_runs_waits_for_its_reply(served: Served, fake: FakeLLM) -> None:
    fake.hang(1.0)  # the model takes a second: the retry comes meanwhile
    body = {"conversation_id": "t", "text": "slow", "user_id": "ana"}
    first = asyncio.create_task(post(served.url, body, key="k-slow"))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    retry = await post(served.url, body, key="k-slow")
    answered = await first
    assert retry.status_code == answered.status_code == 200
    assert retry.json() == answered.json() and retry.headers["idempotent-replayed"] == "true"
    assert len(fake.requests) == 1
    assert await served.messages("webhook:t") == ["slow", "fake reply to: slow"]


async def test_a_key_names_one_conversation_and_a_bad_key_is_refused(served: Served) -> None:
    assert (await post(served.url, {"conversation_id": "a", "text": "hi"}, key="k")).status_code == 200
    clash = await post(served.url, {"conversation_id": "b", "text": "hi"}, key="k")
    assert clash.status_code == 409 and "webhook:a" in clash.json()["error"]
    differ = await post(served.url, {"conversation_id": "a", "text": "hi", "message_id": "x"}, key="k")
    assert differ.status_code == 409 and "differ" in differ.json()["error"]
    spaced = await post(served.url, {"conversation_id": "a", "text": "hi", "message_id": "a b"})
    assert spaced.status_code == 422
    assert await served.messages("webhook:b") == []


async def test_a_streamed_retry_gets_the_first_reply(served: Served, fake: FakeLLM) -> None:
    body = {"conversation_id": "s", "text": "stream it"}
    replies = []
    async with httpx.AsyncClient(base_url=served.url, headers=AUTH | {"Idempotency-Key": "k-s"}) as http:
        for _ in range(2):
            async with http.stream("POST", "/agents/assistant/messages?stream=true", json=body) as response:
                replies += [json.loads(e.data) async for e in sse_events(response) if e.event == "reply"]
    assert [r["reply"] for r in replies] == ["fake reply to: stream it"] * 2
    assert len(fake.requests) == 1 and len(await served.messages("webhook:s")) == 2


async def test_a_streamed_request_reusing_a_key_of_another_conversation_is_refused_in_the_stream(
    served: Served, fake: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal reaches the client as the stream's error event, and is no failure of agentd's (no
    error logged)."""
    async with httpx.AsyncClient(base_url=served.url, headers=AUTH | {"Idempotency-Key": "k-x"}) as http:
        first = await http.post("/agents/assistant/messages", json={"conversation_id": "x1", "text": "one"})
        assert first.status_code == 200
        body = {"conversation_id": "x2", "text": "two"}
        async with http.stream("POST", "/agents/assistant/messages?stream=true", json=body) as response:
            events = [e async for e in sse_events(response)]
    assert [e.event for e in events if e.event in ("reply", "error")] == ["error"]
    assert "named a message of conversation 'webhook:x1'" in events[-1].data
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await served.messages("webhook:x2") == [] and len(fake.requests) == 1


async def across_a_restart(
    agents: Path, data: Path, body: dict[str, object], key: str
) -> tuple[list[httpx.Response], list[str]]:
    """The same request to two daemons, one after the other, on the same data folder; what the
    conversation holds at the end."""
    answers = []
    for _ in range(2):
        daemon = Daemon(agents, data, reload_interval=60)
        await daemon.start()
        try:
            async with serve_on_loopback(create_app(daemon)) as url:
                answers.append(await post(url, body, key=key))
                stored = await Served(daemon, url).messages(f"webhook:{body['conversation_id']}")
        finally:
            await daemon.shutdown()
    return answers, stored


async def test_a_retry_after_a_restart_is_answered_from_the_store(tmp_path: Path, fake: FakeLLM) -> None:
    agents = write_folder(tmp_path, fake)
    body = {"conversation_id": "r", "text": "before the restart"}
    answers, stored = await across_a_restart(agents, tmp_path / "data", body, "k-r")
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[1].json() == answers[0].json() and answers[1].headers["idempotent-replayed"] == "true"
    assert len(fake.requests) == 1 and stored == ["before the restart", "fake reply to: before the restart"]


async def test_a_failed_first_replayed_after_a_restart_says_nothing_untrue(
    tmp_path: Path, fake: FakeLLM
) -> None:
    """An agent that keeps no transcript kept nothing of a failed first: the replay from the store
    must not claim the message is saved."""
    agents = write_folder(tmp_path, fake)
    (agents / "assistant.yaml").write_text(AGENT.replace("memory: {scope: thread}\n", ""))
    fake.down(500)
    body = {"conversation_id": "f", "text": "while the model is down"}
    responses, stored = await across_a_restart(agents, tmp_path / "data", body, "k-f")
    answers = [r.json() for r in responses]
    assert answers[0]["error"] == "provider_error" and "Nothing was kept" in answers[0]["reply"]
    assert answers[1]["error"] == "provider_error" and answers[1]["run_id"] == answers[0]["run_id"]
    assert "saved" not in answers[1]["reply"], answers[1]["reply"]
    assert stored == []  # indeed nothing was kept


async def test_the_official_client_retrying_a_timeout_stores_the_message_once(
    served: Served, fake: FakeLLM
) -> None:
    fake.hang(1.5)  # longer than the client waits: it gives up and sends the request again
    async with openai.AsyncOpenAI(
        base_url=f"{served.url}/v1", api_key=TOKEN, timeout=0.5, max_retries=5
    ) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="assistant",
            user="ana",
            messages=[{"role": "user", "content": "are you there?"}],
            extra_headers={"Idempotency-Key": "call-1"},
        )
    assert raw.retries_taken >= 1  # the first attempt timed out
    assert raw.parse().choices[0].message.content == "fake reply to: are you there?"
    assert raw.headers["idempotent-replayed"] == "true"
    assert len(fake.requests) == 1
    assert await served.messages("openai:ana") == ["are you there?", "fake reply to: are you there?"]


async def test_openai_retries_with_one_key_are_answered_once_and_a_stateless_one_too(
    served: Served, fake: FakeLLM
) -> None:
    async with openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=TOKEN, max_retries=0) as client:
        for user in ("ana", None):
            ask = {"model": "assistant", "messages": [{"role": "user", "content": f"hi {user}"}]}
            if user is not None:
                ask["user"] = user
            first, again = [
                await client.chat.completions.with_raw_response.create(  # type: ignore[call-overload]
                    **ask, extra_body={"message_id": f"m-{user}"}
                )
                for _ in range(2)
            ]
            assert first.parse().choices[0].message.content == again.parse().choices[0].message.content
            assert first.parse().id == again.parse().id
            assert again.headers["idempotent-replayed"] == "true"
    assert len(fake.requests) == 2
    assert len(await served.messages("openai:ana")) == 2


async def test_two_daemons_on_one_database_answer_a_key_once(
    tmp_path: Path, fake: FakeLLM, postgres_url: str
) -> None:
    agents = write_folder(tmp_path, fake)
    (tmp_path / "agentd.yaml").write_text(
        (tmp_path / "agentd.yaml").read_text() + f"store: {{url: '{postgres_url}'}}\n"
    )
    daemons = [Daemon(agents, tmp_path / name, reload_interval=60) for name in ("a", "b")]
    for daemon in daemons:
        await daemon.start()
    try:
        async with (
            serve_on_loopback(create_app(daemons[0])) as a,
            serve_on_loopback(create_app(daemons[1])) as b,
        ):
            fake.hang(1.0)
            body = {"conversation_id": "two", "text": "once only"}
            first = asyncio.create_task(post(a, body, key="k-2"))
            await asyncio.to_thread(fake.wait_for_requests, 1)
            retry = await post(b, body, key="k-2")  # the load balancer sent the retry elsewhere
            answered = await first
            later = await post(b, body, key="k-2")
            stored = await Served(daemons[1], b).messages("webhook:two")
    finally:
        for daemon in daemons:
            await daemon.shutdown()
    assert answered.status_code == retry.status_code == later.status_code == 200, retry.text
    assert retry.json() == answered.json() == later.json()
    assert retry.headers["idempotent-replayed"] == later.headers["idempotent-replayed"] == "true"
    assert len(fake.requests) == 1 and stored == ["once only", "fake reply to: once only"]
