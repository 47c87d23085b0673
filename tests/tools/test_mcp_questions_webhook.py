"""A tool server's question to a webhook conversation (server-everything's elicitation tool, a daemon
served on loopback): without `deliver_url`, a non-streamed request's question is listed at
GET /agents/{agent}/questions and answered at POST …/questions/{id} while the request waits for its
final reply; with it, the question is a signed `elicitation.requested` event to that URL (verified by
the Standard Webhooks reference library), answered the same way."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from testkit.fake_llm import FakeLLM
from testkit.serving import serve_on_loopback
from testkit.waiting import wait_until
from tests.channels.test_webhook_delivery import library_secret
from tests.support import daemon_on_loopback
from tests.tools.reference import everything, needs_node
from tests.tools.support import tool_results

pytestmark = needs_node
ASK = "everything__trigger-elicitation-request"
SECRET = "s3cret-for-the-hook-0123456789"


def agent_file(webhook: dict[str, Any]) -> str:
    tools = json.dumps({"mcp": {"everything": everything()}})
    return (
        f"purpose: You help.\nmodel: fake/m\nmemory: {{scope: thread}}\n"
        f"channels: {{webhook: {json.dumps(webhook)}}}\ntools: {tools}\n"
    )


def settings(fake: FakeLLM) -> str:
    return f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"


async def ask(client: httpx.AsyncClient, fake: FakeLLM) -> asyncio.Task[httpx.Response]:
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Thanks, noted.")
    body = {"conversation_id": "c1", "user_id": "ana", "text": "sign me up"}
    return asyncio.create_task(client.post("/agents/assistant/messages", json=body))


async def listed(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The questions waiting, once there are some (the server asks a moment after the call)."""
    for _ in range(400):
        questions: list[dict[str, Any]] = (await client.get("/agents/assistant/questions")).json()[
            "questions"
        ]
        if questions:
            return questions
        await asyncio.sleep(0.05)
    raise AssertionError("no question was listed within 20 s")


async def audited(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    events = (await client.get("/audit", params={"agent": "assistant", "kind": "tool"})).json()["events"]
    return [e for e in events if "elicitation" in e["action"]]


async def test_a_non_streamed_requests_question_is_listed_and_answered_over_http(
    tmp_path: Path, fake: FakeLLM
) -> None:
    async with (
        daemon_on_loopback(tmp_path, {"assistant": agent_file({})}, settings(fake)) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client,
    ):
        assert (await client.get("/agents/assistant/questions")).json() == {"questions": []}
        turn = await ask(client, fake)
        [q] = await listed(client)
        assert (q["conversation_key"], q["user_id"], q["server"], q["mode"]) == (
            "webhook:c1",
            "ana",
            "everything",
            "form",
        )
        assert q["message"].startswith("Please provide inputs") and "name" in q["fields"] and q["url"] is None
        assert q["fields"]["name"]["type"] == "string" and "name" in q["required"]
        assert q["expires_at"] > 0 and not turn.done()

        path = f"/agents/assistant/questions/{q['id']}"
        unknown = await client.post("/agents/assistant/questions/abcdef", json={"action": "decline"})
        assert unknown.status_code == 404 and "no question [abcdef]" in unknown.json()["error"]
        misfit = await client.post(path, json={"action": "accept", "content": {"name": 5}})
        assert misfit.status_code == 422 and "name: expected a string" in misfit.json()["error"]
        stranger = await client.post(path, json={"action": "accept", "content": {"name": "A", "nope": 1}})
        assert stranger.status_code == 422 and "not fields of this form: nope" in stranger.json()["error"]
        bad = await client.post(path, json={"action": "maybe"})
        assert bad.status_code == 422  # not one of the actions: the body's schema refuses it
        assert not turn.done()

        content = {"name": "Ana Lima", "check": True, "integer": 7}
        sent = await client.post(path, json={"action": "accept", "content": content})
        assert sent.status_code == 200, sent.text
        assert sent.json() == {
            "question": q["id"],
            "status": "answered",
            "text": f"Sent the answer to everything [{q['id']}].",
        }
        reply = await turn
        assert reply.status_code == 200 and reply.json()["reply"] == "Thanks, noted."
        [result] = tool_results(fake.requests[1].json)
        assert "- Name: Ana Lima" in result and "Agreed to terms: true" in result
        again = await client.post(path, json={"action": "decline"})
        assert again.status_code == 409 and "already answered" in again.json()["error"]
        events = await audited(client)
        assert sorted(e["action"] for e in events) == ["elicitation_answered", "elicitation_requested"]
        requested = next(e for e in events if e["action"] == "elicitation_requested")
        answered = next(e for e in events if e["action"] == "elicitation_answered")
        assert requested["data"]["via"] == "http" and answered["data"]["by"] == "http"
        assert "Ana Lima" not in json.dumps(events)


async def test_with_deliver_url_the_question_is_a_signed_event_there(tmp_path: Path, fake: FakeLLM) -> None:
    got: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: Request) -> Response:
        got.append((dict(request.headers), await request.body()))
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with serve_on_loopback(receiver) as hook_url:
        webhook = {"deliver_url": f"{hook_url}/hook", "signing_secret": SECRET}
        async with (
            daemon_on_loopback(tmp_path, {"assistant": agent_file(webhook)}, settings(fake)) as (_, url),
            httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client,
        ):
            turn = await ask(client, fake)
            await wait_until(lambda: got, "the question's delivery", timeout=20)
            [(headers, body)] = got
            event = Webhook(library_secret(SECRET)).verify(body, headers)
            assert isinstance(event, dict) and event["type"] == "elicitation.requested"
            data = event["data"]
            assert (data["agent"], data["conversation"], data["server"]) == (
                "assistant",
                "webhook:c1",
                "everything",
            )
            assert data["user_id"] == "ana" and data["mode"] == "form" and "name" in data["fields"]
            assert data["expires_at"].endswith("Z") and f"/decline {data['id']}" in data["text"]
            assert data["answer"] == f"POST /agents/assistant/questions/{data['id']}"
            assert headers["webhook-id"] == f"question_{data['id']}"

            declined = await client.post(data["answer"].split(" ")[1], json={"action": "decline"})
            assert declined.status_code == 200 and declined.json()["text"].startswith("Declined")
            assert (await turn).json()["reply"] == "Thanks, noted."
            assert "decline" in tool_results(fake.requests[1].json)[0].lower()
            events = await audited(client)
            assert sorted(e["action"] for e in events) == ["elicitation_declined", "elicitation_requested"]
            assert (
                next(e for e in events if e["action"] == "elicitation_requested")["data"]["via"] == "webhook"
            )
