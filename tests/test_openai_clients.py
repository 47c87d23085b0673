"""Third-party OpenAI clients against the endpoint: simonw's `llm` command (issue 22).

`llm --no-stream` read `usage` from every completion and crashed without it. Here the real command,
configured as its documentation says for an OpenAI-compatible server (extra-openai-models.yaml in its
user folder), talks to a daemon on loopback whose agent's model is the fake OpenAI server; the tokens
`llm` logs are the fake's counts, streamed and not.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback

ASSISTANT = "purpose: You help.\nmodel: fake/m\nchannels: {webhook: {}}\n"
TOKEN = "s3cret"
LLM = Path(sys.executable).parent / "llm"


@pytest.fixture
async def llm_home(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[Path]:
    settings = (
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    (tmp_path / "daemon").mkdir()
    async with daemon_on_loopback(tmp_path / "daemon", {"assistant": ASSISTANT}, settings) as (_, url):
        home = tmp_path / "llm"
        home.mkdir()
        (home / "extra-openai-models.yaml").write_text(
            f"- model_id: agentd-assistant\n  model_name: assistant\n  api_base: '{url}/v1'\n"
            "  api_key_name: agentd\n"
        )
        (home / "keys.json").write_text(json.dumps({"agentd": TOKEN}))
        yield home


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
