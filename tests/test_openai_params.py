"""Chat Completions parameters that change the answer, sent by the official `openai` client (issue 22).

`stop` and `max_tokens` / `max_completion_tokens` reach the agent's model (the fake OpenAI and Anthropic
servers record what agentd sent them; the offline model cuts its own answer); `logprobs` and audio
output are refused with a 400 naming the parameter; any other parameter is listed in `x-agentd-ignored`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from agentd.daemon import Daemon
from agentd.http.errors import ApiError
from agentd.http.openai_params import REQUEST_PROPERTIES, turn_limits
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback

WEB = "channels: {webhook: {}}\n"
TOKEN = "s3cret"


@pytest.fixture
async def client(tmp_path: Path, fake: FakeLLM) -> AsyncIterator[openai.AsyncOpenAI]:
    settings = (
        "providers:\n"
        f"  fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}\n"
        f"  claude: {{kind: anthropic, base_url: '{fake.anthropic_base_url}', api_key: k, max_retries: 0}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    agents = {
        "gpt": f"model: fake/m\n{WEB}",
        "capped": f"model: {{name: fake/m, max_output_tokens: 5}}\n{WEB}",
        "claude": f"model: claude/sonnet\n{WEB}",
        "offline-bot": WEB,
    }
    running: tuple[Daemon, str]
    async with daemon_on_loopback(tmp_path, agents, settings) as running:
        async with openai.AsyncOpenAI(base_url=f"{running[1]}/v1", api_key=TOKEN, max_retries=0) as c:
            yield c


def ask(model: str, **more: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Tell me about Lisbon."}], **more}


async def test_stop_and_max_tokens_reach_an_openai_model(client: openai.AsyncOpenAI, fake: FakeLLM) -> None:
    await client.chat.completions.create(**ask("gpt", stop=["END", "\n\n"], max_tokens=40))
    sent = fake.requests[-1].json
    assert (sent["stop"], sent["max_tokens"]) == (["END", "\n\n"], 40)

    await client.chat.completions.create(**ask("gpt", stop="END", max_completion_tokens=30))
    sent = fake.requests[-1].json
    assert (sent["stop"], sent["max_tokens"]) == (["END"], 30)

    await client.chat.completions.create(**ask("gpt"))
    assert "stop" not in fake.requests[-1].json and "max_tokens" not in fake.requests[-1].json


async def test_a_model_cut_short_finishes_with_length(client: openai.AsyncOpenAI, fake: FakeLLM) -> None:
    fake.reply("Lisbon is", stop_reason="length")
    cut = await client.chat.completions.create(**ask("gpt", max_tokens=2))
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == ("Lisbon is", "length")
    fake.reply("Lisbon is", pieces=["Lisbon ", "is"], stop_reason="length")
    stream = await client.chat.completions.create(**ask("gpt", max_tokens=2, stream=True))
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes[-1] == "length"


async def test_the_agent_files_limit_still_caps(client: openai.AsyncOpenAI, fake: FakeLLM) -> None:
    await client.chat.completions.create(**ask("capped", max_tokens=500))
    assert fake.requests[-1].json["max_tokens"] == 5
    await client.chat.completions.create(**ask("capped", max_tokens=3))
    assert fake.requests[-1].json["max_tokens"] == 3


async def test_stop_and_max_tokens_reach_an_anthropic_model(
    client: openai.AsyncOpenAI, fake: FakeLLM
) -> None:
    await client.chat.completions.create(**ask("claude", stop=["END"], max_tokens=64))
    sent = fake.requests[-1].json
    assert fake.requests[-1].path.endswith("/messages")
    assert (sent["stop_sequences"], sent["max_tokens"]) == (["END"], 64)


async def test_the_offline_model_honours_stop_and_max_tokens(client: openai.AsyncOpenAI) -> None:
    whole = await client.chat.completions.create(**ask("offline-bot"))
    text = str(whole.choices[0].message.content)
    assert text.startswith("(offline model) I see 0 earlier messages")
    stopped = await client.chat.completions.create(**ask("offline-bot", stop=["earlier"]))
    assert stopped.choices[0].message.content == "(offline model) I see 0 "
    short = await client.chat.completions.create(**ask("offline-bot", max_tokens=2))
    assert short.choices[0].message.content == text[:8]
    assert short.choices[0].finish_reason == "length" and stopped.choices[0].finish_reason == "stop"
    stream = await client.chat.completions.create(**ask("offline-bot", stop="earlier", stream=True))
    assert (
        "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        == "(offline model) I see 0 "
    )


@pytest.mark.parametrize(
    ("more", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
async def test_what_agentd_cannot_give_is_refused(
    client: openai.AsyncOpenAI, fake: FakeLLM, more: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(**ask("gpt", **more))
    assert refused.value.param == param and refused.value.status_code == 400
    assert isinstance(refused.value.body, dict) and param in refused.value.body["message"]
    assert fake.requests == []  # refused before the model was called


async def test_ignored_parameters_are_listed(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        **ask("offline-bot", temperature=0.2, top_p=0.9, seed=7, logprobs=False, modalities=["text"])
    )
    assert raw.headers["x-agentd-ignored"] == "seed, temperature, top_p"
    plain = await client.chat.completions.with_raw_response.create(**ask("offline-bot", stop="x"))
    assert "x-agentd-ignored" not in plain.headers


def test_the_documented_parameters_are_exactly_what_is_accepted() -> None:
    """The request schema's properties for these parameters (which schemathesis fuzzes in CI) accept
    what turn_limits accepts, and nothing it refuses."""
    schema = {"type": "object", "properties": REQUEST_PROPERTIES}
    accepted = [
        {"stop": "x"},
        {"stop": ["a", "b", "c", "d"]},
        {"stop": None, "max_tokens": 5, "max_completion_tokens": 64.0},
        {"logprobs": False, "modalities": ["text"]},
    ]
    refused = [
        {"stop": ""},
        {"stop": ["a"] * 5},
        {"stop": 3},
        {"max_tokens": 0},
        {"max_tokens": 2.5},
        {"max_tokens": True},
        {"logprobs": True},
        {"logprobs": 0},
        {"top_logprobs": 1},
        {"modalities": ["text", "audio"]},
        {"modalities": []},
        {"audio": {"voice": "alloy"}},
    ]
    validator = jsonschema.Draft202012Validator(schema)
    for params in accepted:
        assert validator.is_valid(params), params
        turn_limits(params)
    for params in refused:
        assert not validator.is_valid(params), params
        with pytest.raises(ApiError):
            turn_limits(params)
