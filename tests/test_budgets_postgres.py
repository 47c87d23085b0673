"""Budgets and rate limits shared by two daemons on one PostgreSQL database: 2 daemons × 16 concurrent
clients on one person's budget pass it by at most one call's estimate; a rate limit holds across both.
Each daemon is a real Daemon (its own backend, pool and agents folder) serving the real openai provider
against the fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from agentd.daemon.daemon import Daemon
from agentd.http.app import create_app
from agentd.store.postgres.connection import SCHEMA
from testkit.clock import ManualClock
from testkit.fake_llm import FakeLLM

PRICE = 1000  # dollars per 1M tokens: a token costs 1000 micro-dollars
MAX_OUT = 50
AGENT = f"model:\n  name: fake/gpt-test\n  max_output_tokens: {MAX_OUT}\nchannels:\n  webhook: {{}}\n"


@pytest.fixture
def fake() -> AsyncIterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def _settings(url: str, fake: FakeLLM, extra: str) -> str:
    return (
        f"store: {{url: '{url}'}}\n"
        f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"prices: {{fake/gpt-test: {{input: {PRICE}, output: {PRICE}}}}}\n" + extra
    )


async def _two_daemons(
    root: Path, settings: str, clock: ManualClock | None = None
) -> list[tuple[Daemon, httpx.AsyncClient]]:
    out = []
    for name in ("one", "two"):
        (root / name / "agents").mkdir(parents=True)
        (root / name / "agents" / "bot.yaml").write_text(AGENT)
        (root / name / "agentd.yaml").write_text(settings)
        daemon = Daemon(root / name / "agents", root / name / "data", reload_interval=60)
        if clock is not None:
            daemon.clock = clock
        await daemon.start()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(daemon)), base_url="http://agentd"
        )
        out.append((daemon, client))
    return out


async def _close(pairs: list[tuple[Daemon, httpx.AsyncClient]]) -> None:
    for daemon, client in pairs:
        await client.aclose()
        await daemon.shutdown()


def _rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, options=f"-c search_path={SCHEMA}") as conn:
        return conn.execute(sql).fetchall()


async def test_two_daemons_with_16_clients_each_pass_one_budget_by_at_most_one_calls_estimate(
    tmp_path: Path, postgres_url: str, fake: FakeLLM
) -> None:
    limit = 0.30  # dollars: a handful of calls at ~40-60 tokens each
    settings = _settings(postgres_url, fake, f'budgets:\n  - {{per: person, limit: "${limit}/day"}}\n')
    for _ in range(64):
        fake.reply("an answer of a few words", usage=(30, 10))
    pairs = await _two_daemons(tmp_path, settings)
    try:

        async def client_turn(client: httpx.AsyncClient, n: int) -> dict:
            r = await client.post(
                "/agents/bot/messages",
                json={"conversation_id": f"c{n}", "text": f"hello {n}", "user_id": "ana"},
            )
            assert r.status_code == 200, r.text
            return r.json()

        replies = await asyncio.gather(
            *[client_turn(client, i * 100 + n) for i, (_, client) in enumerate(pairs) for n in range(16)]
        )
        answered = [r for r in replies if r["error"] is None]
        refused = [r for r in replies if r["error"] == "budget"]
        assert answered and refused and len(answered) + len(refused) == 32
        [(spent,)] = _rows(postgres_url, "SELECT used FROM budget_spend WHERE subject = 'webhook:ana'")
        [(calls, cost)] = _rows(
            postgres_url, "SELECT sum(calls), sum(cost_micros) FROM usage_days WHERE who = 'webhook:ana'"
        )
        assert calls == len(answered) and spent == cost == len(answered) * 40 * PRICE  # settled as reported
        # one call's estimate: its prompt's estimated tokens (a few) and its output cap, at the price
        estimate = (MAX_OUT + 20) * PRICE
        overshoot = spent - round(limit * 1_000_000)
        print(
            f"overshoot {overshoot} micro-dollars ({overshoot / (40 * PRICE):.2f} calls) of at most {estimate}"
        )
        assert overshoot <= estimate
        if overshoot < 0:
            # refused while calls in flight held their estimates (above what they then used): once those
            # settled, the budget is below its limit again and admits the next call
            assert (await client_turn(pairs[0][1], 999))["error"] is None
    finally:
        await _close(pairs)
    told = [r for r in refused if r["reply"]]
    assert len(told) == 1  # said once, whichever daemon refused first (the counter's row remembers it)


async def test_two_daemons_share_a_rate_limit(tmp_path: Path, postgres_url: str, fake: FakeLLM) -> None:
    clock = ManualClock()
    settings = _settings(postgres_url, fake, "rate_limits: [{per: person, limit: 5/minute}]\n")
    pairs = await _two_daemons(tmp_path, settings, clock)
    try:

        async def send(client: httpx.AsyncClient, n: int) -> dict:
            r = await client.post(
                "/agents/bot/messages", json={"conversation_id": f"c{n}", "text": f"hi {n}", "user_id": "ana"}
            )
            assert r.status_code == 200, r.text
            return r.json()

        burst = await asyncio.gather(*[send(pairs[n % 2][1], n) for n in range(12)])
        answered = [r for r in burst if r["run_id"] is not None]
        told = [r for r in burst if r["run_id"] is None and r["reply"]]
        assert len(answered) == 5  # the bucket is the database's: five in all, not five per daemon
        assert len(told) == 1  # told to slow down once, whichever daemon refused first; the rest dropped
        clock.advance(12)  # 5/minute: one token back every 12 seconds
        later = [await send(pairs[n % 2][1], 100 + n) for n in range(2)]
        assert [r["run_id"] is not None for r in later] == [True, False]
    finally:
        await _close(pairs)
    events = _rows(postgres_url, "SELECT action, data FROM audit WHERE kind = 'rate_limit' ORDER BY id")
    # a row where a streak starts and one with its count where it ends, never one per message: the 7
    # dropped of the burst (on either daemon), then the new streak of the last one
    assert [(a, json.loads(d).get("refused")) for a, d in events] == [
        ("limited", None),
        ("streak_ended", 7),
        ("limited", None),
    ]
