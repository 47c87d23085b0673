"""GET /metrics: Prometheus text of what the daemon did, read with prometheus-client's own parser."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd.daemon import Daemon
from agentd.http.app import create_app
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def llm() -> AsyncIterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


async def open_daemon(root: Path, llm: FakeLLM) -> Daemon:
    agents = root / "agents"
    agents.mkdir()
    (agents / "remote.yaml").write_text(
        "model: openai/gpt-test\nmemory: {scope: thread, compact_at_tokens: 100000}\nchannels: {webhook: {}}\n"
    )
    (agents / "local.yaml").write_text("memory: {scope: thread}\nchannels: {webhook: {}}\n")
    (root / "agentd.yaml").write_text(
        f"http: {{token: {TOKEN}}}\n"
        f"providers:\n  openai: {{kind: openai, base_url: '{llm.openai_base_url}', api_key: k, max_retries: 0}}\n"
    )
    daemon = Daemon(agents, root / "data", reload_interval=60)
    await daemon.start()
    return daemon


@pytest.fixture
async def api(tmp_path: Path, llm: FakeLLM) -> AsyncIterator[httpx.AsyncClient]:
    daemon = await open_daemon(tmp_path, llm)
    transport = httpx.ASGITransport(app=create_app(daemon))
    async with httpx.AsyncClient(transport=transport, base_url="http://agentd", headers=AUTH) as client:
        yield client
    await daemon.shutdown()


async def say(api: httpx.AsyncClient, agent: str, text: str, conversation: str = "c1") -> httpx.Response:
    return await api.post(f"/agents/{agent}/messages", json={"conversation_id": conversation, "text": text})


async def scrape(api: httpx.AsyncClient) -> str:
    r = await api.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


async def test_turns_commands_tokens_and_model_calls_are_counted(
    api: httpx.AsyncClient, llm: FakeLLM
) -> None:
    llm.reply("hello", usage=(12, 3))
    llm.fail(500)
    assert (await say(api, "remote", "hi")).json()["error"] is None
    assert (await say(api, "remote", "again")).json()["error"] == "provider_error"
    assert (await say(api, "local", "hi")).status_code == 200
    assert (await say(api, "local", "/status")).status_code == 200

    text = await scrape(api)
    assert value(text, "agentd_turns_total", agent="remote", channel="webhook", outcome="ok") == 1
    assert value(text, "agentd_turns_total", agent="remote", channel="webhook", outcome="error") == 1
    assert value(text, "agentd_turns_total", agent="local", channel="webhook", outcome="ok") == 1
    assert value(text, "agentd_commands_total", agent="local", channel="webhook") == 1
    assert value(text, "agentd_tokens_total", agent="remote", direction="in") == 12
    assert value(text, "agentd_tokens_total", agent="remote", direction="out") == 3
    assert value(text, "agentd_turn_duration_seconds_count", channel="webhook") == 3
    calls = "agentd_model_call_duration_seconds_count"
    assert value(text, calls, provider="openai", purpose="chat", outcome="ok") == 1
    assert value(text, calls, provider="openai", purpose="chat", outcome="error") == 1
    assert value(text, calls, provider="offline", purpose="chat", outcome="ok") == 1
    # every turn and command committed at least once on the store thread
    assert value(text, "agentd_store_commit_duration_seconds_count") >= 4
    assert value(text, "agentd_agents", status="running") == 2
    assert value(text, "agentd_channel_state", agent="local", channel="webhook", state="running") == 1
    # what the process holds for all agents (GET /agents' daemon block)
    assert value(text, "agentd_open_files") == 3  # the two agents (opened at their first turn), _daemon
    assert value(text, "agentd_hot_threads_lookups_total", result="miss") >= 2
    assert 0 < value(text, "agentd_hot_threads_bytes") < value(text, "agentd_hot_threads_budget_bytes")


async def test_compactions_are_memory_runs(api: httpx.AsyncClient) -> None:
    for i in range(4):
        assert (await say(api, "local", f"turn {i}")).status_code == 200
    assert "Compacted" in (await say(api, "local", "/compact")).json()["reply"]
    text = await scrape(api)
    assert value(text, "agentd_memory_runs_total", agent="local", trigger="compaction", outcome="ok") == 1


async def test_a_conversation_waiting_behind_a_turn_shows(api: httpx.AsyncClient, llm: FakeLLM) -> None:
    llm.hang(1.0)
    first = asyncio.create_task(say(api, "remote", "slow one"))
    await wait_until(lambda: llm.requests, "the first turn to reach the model")
    second = asyncio.create_task(say(api, "remote", "queued behind it"))
    waiting = 0.0
    while not waiting:
        waiting = value(await scrape(api), "agentd_conversations_waiting", agent="remote")
        await asyncio.sleep(0.01)
    assert waiting == 1
    await asyncio.gather(first, second)
    assert value(await scrape(api), "agentd_conversations_waiting", agent="remote") == 0


async def test_metrics_need_the_token(api: httpx.AsyncClient) -> None:
    r = await api.get("/metrics", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"] == "wrong bearer token"


async def test_each_daemon_counts_its_own(tmp_path: Path, llm: FakeLLM) -> None:
    """One registry per daemon: two daemons in one process never mix their series."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    daemons = [await open_daemon(tmp_path / name, llm) for name in ("a", "b")]
    try:
        clients = [
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(d)), base_url="http://x", headers=AUTH
            )
            for d in daemons
        ]
        await say(clients[0], "local", "hi")
        texts = [await scrape(c) for c in clients]
        turns = [
            value(t, "agentd_turns_total", agent="local", channel="webhook", outcome="ok") for t in texts
        ]
        assert turns == [1, 0]
        for client in clients:
            await client.aclose()
    finally:
        for daemon in daemons:
            await daemon.shutdown()


async def test_store_commits_are_timed_on_postgresql_too(tmp_path: Path, postgres_url: str) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "local.yaml").write_text("memory: {scope: thread}\nchannels: {webhook: {}}\n")
    (tmp_path / "agentd.yaml").write_text(f"store: {{url: '{postgres_url}'}}\n")
    async with Daemon(agents, tmp_path / "data", reload_interval=60) as daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as api:
            before = value(await scrape(api), "agentd_store_commit_duration_seconds_count")
            for i in range(3):
                assert (await say(api, "local", f"turn {i}")).status_code == 200
            text = await scrape(api)
    # each turn committed at least once on one of the database's threads, and took some time
    assert value(text, "agentd_store_commit_duration_seconds_count") >= before + 3
    assert value(text, "agentd_store_commit_duration_seconds_sum") > 0
