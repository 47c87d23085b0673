"""What a person sees of an MCP call in a streamed reply (`POST …/messages?stream=true` on a daemon served
on loopback, server-everything behind it): its progress as `progress` events, and a server's question,
answered with `/answer` in another request of the same conversation while the first still streams."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import daemon_on_loopback, sse_events
from tests.tools.reference import everything, needs_node
from tests.tools.support import tool_results

pytestmark = needs_node


@pytest.fixture
async def api(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    tools = {"mcp": {"everything": everything()}}
    agent = f"purpose: You help.\nmodel: fake/m\nmemory: {{scope: thread}}\nchannels: {{webhook: {{}}}}\ntools: {json.dumps(tools)}\n"
    settings = f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
    async with (
        daemon_on_loopback(tmp_path, {"assistant": agent}, settings) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client,
    ):
        yield client


async def stream(client: httpx.AsyncClient, text: str, seen: list[tuple[str, Any]]) -> None:
    body = {"conversation_id": "c1", "user_id": "ana", "text": text}
    async with client.stream("POST", "/agents/assistant/messages", params={"stream": "true"}, json=body) as r:
        assert r.status_code == 200
        async for event in sse_events(r):
            seen.append((event.event, json.loads(event.data)))


async def test_progress_reaches_the_stream(api: httpx.AsyncClient, fake: FakeLLM) -> None:
    fake.reply(tool_calls=[("everything__trigger-long-running-operation", {"duration": 0.6, "steps": 3})])
    fake.reply("done")
    seen: list[tuple[str, Any]] = []
    await stream(api, "run the long one", seen)
    progress = [data["text"] for event, data in seen if event == "progress"]
    assert progress == [f"trigger-long-running-operation: {i}/3" for i in (1, 2, 3)]
    assert seen[-1][0] == "reply" and seen[-1][1]["reply"] == "done"


async def test_a_servers_question_is_streamed_and_answered_from_another_request(
    api: httpx.AsyncClient, fake: FakeLLM
) -> None:
    fake.reply(tool_calls=[("everything__trigger-elicitation-request", {})])
    fake.reply("Thanks.")
    seen: list[tuple[str, Any]] = []
    turn = asyncio.create_task(stream(api, "sign me up", seen))
    await wait_until(lambda: any(event == "progress" for event, _ in seen), "the question", timeout=20)
    [question] = [data["text"] for event, data in seen if event == "progress"]
    qid = re.search(r"asks \[([0-9a-f]{6})\]", question)
    assert qid, question
    answer = {"conversation_id": "c1", "user_id": "ana", "text": f'/answer {qid.group(1)} {{"name": "Ana"}}'}
    sent = await api.post("/agents/assistant/messages", json=answer)
    assert sent.status_code == 200 and sent.json()["reply"].startswith("Sent your answer")
    await turn
    assert seen[-1][1]["reply"] == "Thanks."
    assert "- Name: Ana" in tool_results(fake.requests[1].json)[0]
