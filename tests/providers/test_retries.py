"""Timeouts, retries with backoff and Retry-After, and unreachable providers, over real HTTP."""

import email.utils
import itertools
import time

import httpx
import pytest

from agentd.errors import ProviderError
from agentd.messages import Message
from agentd.providers.anthropic import AnthropicProvider
from agentd.providers.base import CompletionRequest
from agentd.providers.http import Endpoint, post_json
from agentd.providers.openai import OpenAIProvider
from testkit.fake_llm import FakeLLM

REQUEST = CompletionRequest(model="gpt-test", system="", messages=[Message.user("hi")])


def openai(fake: FakeLLM, client: httpx.AsyncClient, **overrides) -> OpenAIProvider:
    options = dict(
        name="openai",
        kind="openai",
        client=client,
        base_url=fake.url + "/v1",
        api_key="sk-test",
        max_retries=3,
        retry_base_s=0.001,
    )
    options.update(overrides)
    return OpenAIProvider(**options)


def gaps(fake: FakeLLM) -> list[float]:
    arrivals = [r.at for r in fake.requests]
    return [b - a for a, b in itertools.pairwise(arrivals)]


async def test_429_waits_as_long_as_retry_after_says_then_succeeds(fake, client):
    fake.fail(429, retry_after=0.3)
    fake.reply("made it")

    completion = await openai(fake, client).complete(REQUEST)

    assert completion.message.text == "made it"
    assert len(fake.requests) == 2
    # the backoff alone would have waited about a millisecond
    assert gaps(fake)[0] >= 0.28


async def test_retry_after_as_an_http_date_is_honoured_and_capped(fake, client):
    far_future = email.utils.formatdate(time.time() + 3600, usegmt=True)
    fake.fail(503, retry_after=far_future)
    endpoint = Endpoint(provider="p", base_url=fake.url, retry_base_s=0.001, retry_after_cap_s=0.3)

    body = await post_json(
        client,
        endpoint,
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        model="m",
    )

    assert body["choices"][0]["message"]["content"] == "fake reply to: x"
    # an unparsed date would fall back to the 1 ms backoff; the cap stops an hour-long wait
    assert 0.28 <= gaps(fake)[0] < 3


async def test_backoff_grows_between_attempts(fake, client):
    for _ in range(3):
        fake.fail(500)
    fake.reply("fourth time lucky")

    completion = await openai(fake, client, retry_base_s=0.08).complete(REQUEST)

    assert completion.message.text == "fourth time lucky"
    # base, 2*base, 4*base, each jittered down to no less than half
    first, second, third = gaps(fake)
    assert first >= 0.04 and second >= 0.08 and third >= 0.16


async def test_a_500_then_success(fake, client):
    fake.fail(500)
    fake.reply("recovered")
    assert (await openai(fake, client).complete(REQUEST)).message.text == "recovered"
    assert len(fake.requests) == 2


async def test_500_forever_gives_up_after_max_retries_plus_one_attempts(fake, client):
    for _ in range(10):
        fake.fail(500, {"error": {"message": "the engine is on fire"}})

    with pytest.raises(ProviderError) as caught:
        await openai(fake, client, max_retries=2).complete(REQUEST)

    assert len(fake.requests) == 3
    error = caught.value
    assert error.status == 500 and error.retryable and not error.unreachable
    assert "HTTP 500" in str(error) and "the engine is on fire" in str(error)
    assert "gave up after 3 attempts" in str(error)


async def test_rate_limited_forever_says_so(fake, client):
    for _ in range(3):
        fake.fail(429, retry_after=0)
    with pytest.raises(ProviderError, match="rate limited") as caught:
        await openai(fake, client, max_retries=2).complete(REQUEST)
    assert caught.value.status == 429
    assert len(fake.requests) == 3


async def test_anthropic_overloaded_529_is_retried(fake, client):
    fake.fail(529)
    fake.reply("calmer now")
    llm = AnthropicProvider(
        name="anthropic", client=client, base_url=fake.url, api_key="k", retry_base_s=0.001
    )
    completion = await llm.complete(REQUEST)
    assert completion.message.text == "calmer now"
    assert [r.path for r in fake.requests] == ["/v1/messages", "/v1/messages"]


async def test_a_timeout_is_unreachable_and_says_where(fake, client):
    fake.hang(10)
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await openai(fake, client, timeout_s=0.3, max_retries=0).complete(REQUEST)

    assert time.monotonic() - started < 5
    error = caught.value
    assert error.unreachable and error.status is None
    assert f"timed out after 0.3s: is {fake.url}/v1 reachable?" in str(error)


async def test_a_timeout_is_retried(fake, client):
    fake.hang(10)
    fake.reply("faster this time")
    # generous enough that the second, answered attempt cannot time out on a loaded box
    completion = await openai(fake, client, timeout_s=1.0).complete(REQUEST)
    assert completion.message.text == "faster this time"
    assert len(fake.requests) == 2


async def test_connection_refused_is_unreachable(client, closed_port):
    llm = OpenAIProvider(
        name="vllm",
        kind="openai",
        client=client,
        base_url=f"http://127.0.0.1:{closed_port}/v1",
        api_key="k",
        max_retries=1,
        retry_base_s=0.001,
    )
    with pytest.raises(ProviderError) as caught:
        await llm.complete(REQUEST)
    assert caught.value.unreachable
    assert f"cannot connect to http://127.0.0.1:{closed_port}/v1: is it running?" in str(caught.value)
    assert "gave up after 2 attempts" in str(caught.value)


async def test_ollama_not_running_says_how_to_start_it(client, closed_port):
    llm = OpenAIProvider(
        name="ollama",
        kind="ollama",
        client=client,
        base_url=f"http://127.0.0.1:{closed_port}/v1",
        max_retries=0,
    )
    with pytest.raises(ProviderError, match=r"is `ollama serve` running\?") as caught:
        await llm.complete(CompletionRequest(model="llama3.2", system="", messages=[Message.user("hi")]))
    assert caught.value.unreachable


async def test_a_dropped_connection_is_retried(fake, client):
    fake.drop()
    fake.reply("second try")
    assert (await openai(fake, client).complete(REQUEST)).message.text == "second try"
    assert len(fake.requests) == 2


async def test_dropped_every_time_is_unreachable(fake, client):
    for _ in range(2):
        fake.drop()
    with pytest.raises(ProviderError, match=r"connection to .* failed") as caught:
        await openai(fake, client, max_retries=1).complete(REQUEST)
    assert caught.value.unreachable
    assert len(fake.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(fake, client, status):
    fake.fail(status)
    with pytest.raises(ProviderError) as caught:
        await openai(fake, client).complete(REQUEST)
    assert caught.value.status == status and not caught.value.retryable
    assert len(fake.requests) == 1
