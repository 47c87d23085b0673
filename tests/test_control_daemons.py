"""Issue 19, section 3, across daemons sharing one PostgreSQL: a `/model` switch made on one daemon is
used by the other's next turn in that conversation (its cache of choices is not trusted on a shared
store); a `/stop` (the HTTP route or the command) that reaches a daemon other than the one running the
turn stops it there (two `agentd run` processes)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess
from tests.test_fallbacks import Clock, agent_on
from tests.test_model_command import ALLOWING, paths, say
from tests.test_overflow import settings


async def test_a_model_switched_on_one_daemon_is_used_by_the_others_next_turn(
    tmp_path: Path, postgres_url: str
) -> None:
    with FakeLLM() as fake:
        async with (
            agent_on(tmp_path / "a", settings(fake), Clock(), ALLOWING, store_url=postgres_url) as a,
            agent_on(tmp_path / "b", settings(fake), Clock(), ALLOWING, store_url=postgres_url) as b,
        ):
            fake.reply("From GPT.")
            assert (await say(a, "hi")).text == "From GPT."  # a has read (and kept) the file's model
            assert paths(fake) == ["/v1/chat/completions"]
            switched = await say(b, "/model claude/sonnet")
            assert switched.text == "Model for this conversation: claude/sonnet (was gpt/mini)."
            fake.reply("From Claude.")
            assert (await say(a, "and now")).text == "From Claude."
            assert paths(fake)[-1] == "/v1/messages"  # a's next turn went to the model chosen on b
            runs = [r["model"] for r in await a.runs("webhook:c") if r["trigger"] == "message"]
            assert runs == ["gpt/mini", "claude/sonnet"]
            assert "Model: claude/sonnet" in (await say(a, "/status")).text
            await say(a, "/model default")  # and back, switched on a, holds on b
            fake.reply("GPT again.")
            assert (await say(b, "again")).text == "GPT again."
            assert paths(fake)[-1] == "/v1/chat/completions"


# -- /stop across daemons --------------------------------------------------------------------------

BOT = "model: gpt/mini\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"


def daemon_root(root: Path, fake: FakeLLM, store_url: str, pooler: str = "none") -> Path:
    (root / "agents").mkdir(parents=True)
    (root / "agents" / "bot.yaml").write_text(BOT)
    provider = f"{{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}"
    (root / "agentd.yaml").write_text(
        f"store: {{url: '{store_url}', pooler: {pooler}}}\nproviders:\n  gpt: {provider}\n"
    )
    return root


async def daemon_id(api: httpx.AsyncClient) -> str:
    return str((await api.get("/readyz")).json()["daemon"])


async def stop_on_b_ends_the_turn_on_a(tmp_path: Path, store_url: str, pooler: str = "none") -> None:
    """Two `agentd run` daemons on one database: a turn held on A (a model call that hangs), its stop
    asked of B, over the HTTP route and as `/stop` in the conversation."""
    with FakeLLM() as fake:
        a = await DaemonProcess(daemon_root(tmp_path / "a", fake, store_url, pooler)).start()
        try:
            b = await DaemonProcess(daemon_root(tmp_path / "b", fake, store_url, pooler)).start()
            try:
                async with (
                    httpx.AsyncClient(base_url=a.url, trust_env=False, timeout=30) as on_a,
                    httpx.AsyncClient(base_url=b.url, trust_env=False, timeout=30) as on_b,
                ):
                    a_id, b_id = await daemon_id(on_a), await daemon_id(on_b)
                    body = {"conversation_id": "c", "text": "write me an essay", "user_id": "ana"}
                    fake.hang(30)
                    turn = asyncio.ensure_future(on_a.post("/agents/bot/messages", json=body))
                    await wait_until(lambda: fake.requests, "A's model call", 10)
                    started = time.monotonic()
                    stopped = await on_b.post("/agents/bot/conversations/webhook:c/stop")
                    assert stopped.status_code == 200, stopped.text
                    out = stopped.json()
                    assert out["stopped"] is True and out["daemon"] == a_id and out["run_id"]
                    reply = (await asyncio.wait_for(turn, 10)).json()
                    assert time.monotonic() - started < 5  # not the 30 s the model would take
                    assert reply["error"] == "stopped" and reply["run_id"] == out["run_id"]
                    [run] = (
                        await on_b.get("/agents/bot/runs", params={"conversation_key": "webhook:c"})
                    ).json()["runs"]
                    assert run["id"] == out["run_id"] and run["status"] == "stopped"
                    shown = (await on_b.get("/agents/bot/conversations/webhook:c")).json()["messages"]
                    assert [(m["role"], m["parts"][0]["text"]) for m in shown] == [
                        ("user", "write me an essay")
                    ]
                    [event] = (await on_b.get("/audit", params={"agent": "bot", "kind": "run"})).json()[
                        "events"
                    ]
                    assert event["action"] == "stopped" and event["daemon"] == a_id
                    assert event["data"]["by"] == "http:127.0.0.1" and event["data"]["asked_on"] == b_id

                    # `/stop` as a message sent to B: the same, answered in the conversation
                    fake.hang(30)
                    turn = asyncio.ensure_future(
                        on_a.post("/agents/bot/messages", json={**body, "text": "again"})
                    )
                    await wait_until(lambda: len(fake.requests) == 2, "A's second model call", 10)
                    command = await on_b.post("/agents/bot/messages", json={**body, "text": "/stop"})
                    assert command.json()["reply"] == "Stopped. Your message is saved; send the next one."
                    assert (await asyncio.wait_for(turn, 10)).json()["error"] == "stopped"

                    # nothing running anywhere: B says so at once
                    started = time.monotonic()
                    nothing = (await on_b.post("/agents/bot/conversations/webhook:c/stop")).json()
                    assert nothing["stopped"] is False and nothing["run_id"] is None
                    assert time.monotonic() - started < 2
                    fake.reply("Hello.")
                    assert (await on_b.post("/agents/bot/messages", json={**body, "text": "hi"})).json()[
                        "reply"
                    ] == "Hello."
                    events = (await on_a.get("/audit", params={"agent": "bot", "kind": "run"})).json()[
                        "events"
                    ]
                    assert [(e["action"], e["daemon"]) for e in events] == [("stopped", a_id)] * 2
            finally:
                b.stop()
        finally:
            a.stop()


@pytest.mark.slow
async def test_a_stop_asked_of_another_daemon_ends_the_turn_where_it_runs(
    tmp_path: Path, postgres_url: str
) -> None:
    await stop_on_b_ends_the_turn_on_a(tmp_path, postgres_url)
