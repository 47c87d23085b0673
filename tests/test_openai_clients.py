"""Third-party OpenAI clients against the endpoint: simonw's `llm` command and LangChain (issue 22).

`llm --no-stream` read `usage` from every completion and crashed without it; LangChain counted zero
tokens. Here the real command, configured as its documentation says for an OpenAI-compatible server
(extra-openai-models.yaml in its user folder), and langchain-openai's ChatOpenAI talk to a daemon on
loopback whose agent's model is the fake OpenAI server; the tokens they report are the fake's counts,
streamed and not. LangChain names the conversation by the X-Agentd-Conversation header (its
`default_headers`), the portable way the README gives.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback

ASSISTANT = "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"
LLM = Path(sys.executable).parent / "llm"


@pytest.fixture
async def url(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[str]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    (tmp_path / "daemon").mkdir()
    async with daemon_on_loopback(tmp_path / "daemon", {"assistant": ASSISTANT}, settings) as (_, base):
        yield base


@pytest.fixture
def llm_home(tmp_path: Path, url: str) -> Path:
    home = tmp_path / "llm"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: agentd-assistant\n  model_name: assistant\n  api_base: '{url}/v1'\n"
        "  api_key_name: agentd\n"
    )
    (home / "keys.json").write_text(json.dumps({"agentd": TOKEN}))
    return home


async def llm(home: Path, *args: str) -> str:
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    env.pop("OPENAI_API_KEY", None)
    process = await asyncio.create_subprocess_exec(
        str(LLM), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_llm_no_stream_reads_the_usage(llm_home: Path, fake: FakeLLM) -> None:
    fake.reply("Lisbon is lovely.", usage=(23, 5))
    said = await llm(llm_home, "-m", "agentd-assistant", "--no-stream", "Tell me about Lisbon.")
    assert said.strip() == "Lisbon is lovely."
    [logged] = json.loads(await llm(llm_home, "logs", "-n", "1", "--json"))
    assert (logged["input_tokens"], logged["output_tokens"]) == (23, 5)


async def test_llm_streamed_logs_the_usage_chunk(llm_home: Path, fake: FakeLLM) -> None:
    fake.reply("Porto too.", pieces=["Porto ", "too."], usage=(31, 3))
    said = await llm(llm_home, "-m", "agentd-assistant", "And Porto?")
    assert said.strip() == "Porto too."
    assert fake.requests[-1].json["stream"] is True
    [logged] = json.loads(await llm(llm_home, "logs", "-n", "1", "--json"))
    assert (logged["input_tokens"], logged["output_tokens"]) == (31, 3)


def chat_model(url: str, **more: object) -> ChatOpenAI:
    return ChatOpenAI(
        model="assistant",
        base_url=f"{url}/v1",
        api_key=TOKEN,  # type: ignore[arg-type]
        max_retries=0,
        default_headers={"X-Agentd-Conversation": "langchain-ana"},
        **more,  # type: ignore[arg-type]
    )


async def test_langchain_reports_the_usage(url: str, fake: FakeLLM) -> None:
    fake.reply("Hello Ana.", usage=(19, 3))
    said = await chat_model(url).ainvoke("Hi, I am Ana.")
    assert said.content == "Hello Ana."
    assert said.usage_metadata is not None
    assert (said.usage_metadata["input_tokens"], said.usage_metadata["output_tokens"]) == (19, 3)
    assert said.usage_metadata["total_tokens"] == 22


async def test_langchain_streamed_reports_the_usage_and_keeps_the_conversation(
    url: str, fake: FakeLLM
) -> None:
    fake.reply("One.", usage=(7, 1))
    fake.reply("Two.", pieces=["T", "wo."], usage=(12, 2))
    await chat_model(url).ainvoke("first")
    chunks = [chunk async for chunk in chat_model(url, stream_usage=True).astream("second")]
    text = "".join(str(c.content) for c in chunks)
    usage = [c.usage_metadata for c in chunks if c.usage_metadata]
    assert text == "Two." and len(usage) == 1
    assert (usage[0]["input_tokens"], usage[0]["output_tokens"]) == (12, 2)
    # the header named one conversation: the second call's model saw the first exchange
    assert [m["content"] for m in fake.requests[-1].json["messages"][1:]] == ["first", "One.", "second"]
