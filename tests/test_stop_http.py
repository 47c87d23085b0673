"""/stop over HTTP (issue 19, section 3): the webhook's stop route during a streamed (SSE) reply, its
refusals, and a caller whose conversation is held by a pending approval answered at once (409), on
the webhook and on the OpenAI-compatible endpoint. A real daemon on loopback and the fake model
server; what is stored afterwards is checked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx

from agentd.store.queries import ActiveThread
from testkit.fake_llm import FakeLLM
from tests.support import daemon_on_loopback, open_api, sse_events
from tests.tools.support import agent_yaml, stdio_server
from tests.tools.test_approvals import script_write

AGENT = "model: gpt/mini\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"


def settings(fake: FakeLLM) -> str:
    return f"providers:\n  gpt: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}\n"


async def test_the_stop_route_ends_a_streamed_reply_at_what_was_shown(tmp_path: Path, fake: FakeLLM) -> None:
    async with daemon_on_loopback(tmp_path, {"bot": AGENT}, settings(fake)) as (daemon, url):
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as api:
            fake.reply("Once upon a time", pieces=["Once ", "upon ", "a ", "time"], delay=1.0)
            body = {"conversation_id": "c", "text": "tell me a story", "user_id": "ana"}
            events = []
            async with api.stream("POST", "/agents/bot/messages?stream=true", json=body) as response:
                async for event in sse_events(response):
                    events.append(event)
                    if event.event == "delta":
                        stopped = await api.post("/agents/bot/conversations/webhook:c/stop")
                        assert stopped.status_code == 200, stopped.text
                        out = stopped.json()
                        assert out["stopped"] is True and out["run_id"]
                        assert out["daemon"] == daemon.daemon_id
            assert [e.event for e in events] == ["delta", "reply"]
            reply = json.loads(events[-1].data)
            assert reply["error"] == "stopped" and reply["reply"] == "Once \n\n(Stopped.)"
            assert reply["run_id"] == out["run_id"]
            agent = daemon.agent("bot")
            assert agent is not None
            thread = await agent.state.store.read(ActiveThread("webhook:c"))
            assert [(m.message.role, m.message.text, m.message.stopped) for m in thread.messages] == [
                ("user", "tell me a story", None),
                ("assistant", "Once ", True),
            ]
            [stop] = (await api.get("/audit", params={"kind": "run"})).json()["events"]
            assert stop["action"] == "stopped" and stop["run_id"] == out["run_id"]
            assert stop["data"]["reason"] == "api" and stop["data"]["by"] == "http:127.0.0.1"
            assert (await api.get("/audit", params={"kind": "model"})).status_code == 200
            # nothing left running: the next message is answered, a second stop finds nothing
            fake.reply("Next.")
            nxt = await api.post("/agents/bot/messages", json={**body, "text": "hi"})
            assert nxt.json()["reply"] == "Next."
            again = await api.post("/agents/bot/conversations/webhook:c/stop")
            assert again.json() == {
                "agent": "bot",
                "conversation_key": "webhook:c",
                "stopped": False,
                "run_id": None,
                "daemon": None,
            }


async def test_the_stop_route_refuses_with_reasons(tmp_path: Path) -> None:
    daemon, api = await open_api(tmp_path, {"bot": "channels: {webhook: {}}\n"})
    try:
        bad = await api.post("/agents/bot/conversations/no-channel/stop")
        assert bad.status_code == 400 and "not a conversation key" in bad.json()["error"]
        missing = await api.post("/agents/nobody/conversations/webhook:c/stop")
        assert missing.status_code == 404 and missing.json()["error"] == "no agent named 'nobody'"
        other = await api.request("OPTIONS", "/agents/bot/conversations/webhook:c/stop")
        assert other.status_code == 405 and other.headers["allow"] == "POST"
    finally:
        await api.aclose()
        await daemon.shutdown()


async def test_a_conversation_held_by_an_approval_answers_409_at_once(tmp_path: Path, fake: FakeLLM) -> None:
    root = tmp_path / "files"
    (tmp_path / "agentd.yaml").write_text(
        f"providers:\n  fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: sk-test}}\n"
    )
    yaml_text = (
        agent_yaml({"files": stdio_server(root)}, ask=["files.write_file"]) + "channels: {webhook: {}}\n"
    )
    daemon, api = await open_api(tmp_path, {"keeper": yaml_text})
    try:
        agent = daemon.agent("keeper")
        assert agent is not None
        await agent.state.tool_servers.wait_ready(20)
        script_write(fake, "Saved.")
        body = {"conversation_id": "c9", "text": "save a note", "user_id": "ana", "message_id": "m1"}
        asked = (await api.post("/agents/keeper/messages", json=body)).json()
        approval, held_run = asked["approval"], asked["run_id"]
        later = {**body, "text": "and another thing", "message_id": "m2"}
        held = await asyncio.wait_for(api.post("/agents/keeper/messages", json=later), 5)
        assert held.status_code == 409
        assert (
            held.json()["approval"] == approval and f"waits for approval {approval}" in held.json()["error"]
        )
        # a retry of the message answered before still gets its reply; /status is answered at once
        assert (await api.post("/agents/keeper/messages", json=body)).json()["approval"] == approval
        status = await api.post(
            "/agents/keeper/messages", json={**later, "text": "/status", "message_id": "m3"}
        )
        assert status.status_code == 200 and f"Waiting for approval [{approval}]" in status.json()["reply"]
        # the OpenAI-compatible endpoint, on a conversation held the same way
        fake.clear()  # (the webhook run's answer, never asked for: that run stays paused)
        script_write(fake, "Saved too.")
        headers = {"X-Agentd-Conversation": "c10"}
        chat = {"model": "keeper", "messages": [{"role": "user", "content": "save it"}]}
        first = await api.post("/v1/chat/completions", json=chat, headers=headers)
        assert first.status_code == 200, first.text
        [waiting] = [a for a in await agent.approvals() if a["conversation_key"] == "openai:c10"]
        second = await asyncio.wait_for(api.post("/v1/chat/completions", json=chat, headers=headers), 5)
        assert second.status_code == 409
        error = second.json()["error"]
        assert error["code"] == "approval_pending" and waiting["id"] in error["message"]
        # nothing of the refused messages was stored
        thread = await agent.state.store.read(ActiveThread("webhook:c9"))
        assert "and another thing" not in [m.message.text for m in thread.messages]
        # the stop route ends the paused run: the conversation takes the message it refused
        stop = (await api.post("/agents/keeper/conversations/webhook:c9/stop")).json()
        assert stop["stopped"] is True and stop["run_id"] == held_run
        fake.clear()  # (the /v1 run's answer, never asked for: that run stays paused)
        fake.reply("Noted.")
        taken = await asyncio.wait_for(api.post("/agents/keeper/messages", json=later), 5)
        assert taken.status_code == 200 and taken.json()["reply"] == "Noted."
        gone = await api.post(f"/agents/keeper/approvals/{approval}", json={"decision": "approve"})
        assert gone.status_code == 409 and "/stop ended its run" in gone.json()["error"]
    finally:
        await api.aclose()
        await daemon.shutdown()
