"""FakeLLM itself: usable from sync code, other threads and other processes; embeddings; scripting."""

import concurrent.futures
import subprocess
import sys
import time

import httpx
import pytest

from testkit.fake_llm import FakeLLM, fake_embedding

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def test_sync_use_with_start_and_stop():
    fake = FakeLLM().start()
    try:
        fake.reply("scripted", usage=(1, 2))
        with httpx.Client(trust_env=False) as http:
            first = http.post(fake.url + "/v1/chat/completions", json=CHAT).json()
            second = http.post(fake.url + "/v1/chat/completions", json=CHAT).json()
        assert first["choices"][0]["message"]["content"] == "scripted"
        assert first["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        assert second["choices"][0]["message"]["content"] == "fake reply to: hello"
        assert fake.pending == 0
    finally:
        fake.stop()
    with pytest.raises(RuntimeError, match="not running"):
        _ = fake.url


def test_embeddings_are_deterministic_unit_vectors_and_have_their_own_fault_queue():
    with FakeLLM(embedding_dim=8) as fake, httpx.Client(trust_env=False) as http:
        fake.reply("for chat only")
        fake.fail(503, endpoint="embeddings")
        url = fake.url + "/v1/embeddings"
        assert http.post(url, json={"model": "e", "input": "a"}).status_code == 503
        body = http.post(url, json={"model": "e", "input": ["a", "b", "a"]}).json()
        wide = http.post(url, json={"model": "e", "input": "a", "dimensions": 32}).json()
        assert fake.pending == 1  # the chat script was left alone
    a, b, a_again = (d["embedding"] for d in body["data"])
    assert a == a_again == fake_embedding("a", 8) and a != b
    assert abs(sum(x * x for x in a) - 1) < 1e-9
    assert len(wide["data"][0]["embedding"]) == 32
    assert body["usage"]["prompt_tokens"] > 0


def test_concurrent_callers_each_get_one_scripted_reply():
    with FakeLLM() as fake:
        for i in range(20):
            fake.reply(f"r{i}")

        def call(_: int) -> str:
            with httpx.Client(trust_env=False) as http:
                reply = http.post(fake.url + "/v1/chat/completions", json=CHAT).json()
            return str(reply["choices"][0]["message"]["content"])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            texts = list(pool.map(call, range(20)))
        assert sorted(texts) == sorted(f"r{i}" for i in range(20))
        assert len(fake.requests) == 20


def test_stop_does_not_wait_for_a_hanging_request():
    fake = FakeLLM().start()
    fake.hang(30)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post, fake.url + "/v1/chat/completions", json=CHAT, timeout=30, trust_env=False
        )
        fake.wait_for_requests(1)
        started = time.monotonic()
        fake.stop()
        assert time.monotonic() - started < 3
        with pytest.raises(httpx.HTTPError):
            pending.result(timeout=10)


def test_a_client_in_another_process_reaches_it():
    code = (
        "import httpx, sys; r = httpx.post(sys.argv[1] + '/v1/messages', headers={'x-api-key': 'k'},"
        " json={'model': 'm', 'max_tokens': 5, 'messages': [{'role': 'user', 'content': 'ping'}]},"
        " trust_env=False); print(r.json()['content'][0]['text'])"
    )
    with FakeLLM(api_key="k") as fake:
        out = subprocess.run(
            [sys.executable, "-c", code, fake.url], capture_output=True, text=True, timeout=30, check=True
        )
        assert out.stdout.strip() == "fake reply to: ping"
        [seen] = fake.requests
        assert seen.headers["x-api-key"] == "k"
