"""`usage` on the OpenAI-compatible endpoint, read by the official `openai` client (issue 22).

The agent's model is the fake OpenAI server, which reports the usage each test scripts: the client must
see exactly those counts, from agentd's run record; the offline model reports none, so its counts are
agentd's estimate and say so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from agentd.daemon import Daemon
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback

ASSISTANT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
OFFLINE = "memory: {scope: thread}\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"


@pytest.fixture
async def client(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    agents = {"assistant": ASSISTANT, "offline-bot": OFFLINE}
    running: tuple[Daemon, str]
    async with daemon_on_loopback(tmp_path, agents, settings) as running:
        async with openai.AsyncOpenAI(base_url=f"{running[1]}/v1", api_key=TOKEN, max_retries=0) as c:
            yield c


async def test_a_completion_has_the_runs_usage(client: openai.AsyncOpenAI, fake: FakeLLM) -> None:
    fake.reply("Hello Ana.", usage=(21, 4))
    raw = await client.chat.completions.with_raw_response.create(
        model="assistant", messages=[{"role": "user", "content": "Hi, I am Ana."}]
    )
    completion = raw.parse()
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (21, 4)
    assert completion.usage.total_tokens == 25
    assert "x-agentd-usage-estimated" not in raw.headers  # the provider counted them


async def test_a_named_conversation_counts_each_call_on_its_own(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("One.", usage=(10, 1))
    fake.reply("Two.", usage=(30, 2))
    counts = []
    for text in ("first", "second"):
        c = await client.chat.completions.create(
            model="assistant", user="ana", messages=[{"role": "user", "content": text}]
        )
        assert c.usage is not None
        counts.append((c.usage.prompt_tokens, c.usage.completion_tokens))
    assert counts == [(10, 1), (30, 2)]


async def test_estimated_counts_are_flagged(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="offline-bot", messages=[{"role": "user", "content": "remember city: Lisbon"}]
    )
    usage = raw.parse().usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert raw.headers["x-agentd-usage-estimated"] == "true"


async def test_a_command_has_zero_usage(client: openai.AsyncOpenAI) -> None:
    c = await client.chat.completions.create(
        model="offline-bot", user="ana", messages=[{"role": "user", "content": "/status"}]
    )
    assert c.usage is not None and c.usage.total_tokens == 0


async def test_a_stream_with_include_usage_ends_with_the_usage_chunk(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("Lisbon is lovely.", pieces=["Lis", "bon is ", "lovely."], usage=(17, 6))
    stream = await client.chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "Lisbon?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    *text_chunks, last = chunks
    assert "".join(c.choices[0].delta.content or "" for c in text_chunks) == "Lisbon is lovely."
    assert all(c.usage is None for c in text_chunks)
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (17, 6, 23)
    assert last.usage.model_extra == {"estimated": False}


async def test_a_stream_without_include_usage_has_no_usage_chunk(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    fake.reply("Fine.", usage=(5, 1))
    stream = await client.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "How are you?"}], stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert chunks and all(c.choices and c.usage is None for c in chunks)
