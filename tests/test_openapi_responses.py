"""The OpenAPI document is a valid OpenAPI 3.1 document, and the daemon's real responses match it.

openapi-spec-validator judges the document; openapi-core (a generic validator, which applies a response's
schema to its whole body) judges every response recorded from a real in-process daemon driven with httpx:
JSON bodies, the Server-Sent Events streams, errors in both shapes, /healthz without the token.
(schemathesis with every check runs against a daemon in CI: .ci/openapi.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_core import Config, OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.deserializing.media_types.util import plain_loads
from openapi_spec_validator import validate
from werkzeug.datastructures import Headers, ImmutableMultiDict

from tests.support import open_api

TOKEN = "s3cret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
AGENT = "memory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


class Recorded:
    """An httpx exchange as openapi-core's request and response protocols read it."""

    def __init__(self, response: httpx.Response):
        request = response.request
        self.host_url = f"{request.url.scheme}://{request.url.netloc.decode()}"
        self.path = request.url.path
        self.method = request.method.lower()
        self.body: bytes | None = request.content
        self.content_type = request.headers.get("content-type", "")
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(request.url.params.multi_items()),
            header=Headers(dict(request.headers)),
            cookie=ImmutableMultiDict(),
        )
        self.response = response

    # the response's side
    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def headers(self) -> Headers:
        return Headers(dict(self.response.headers))

    @property
    def data(self) -> bytes:
        return self.response.content

    @property
    def response_content_type(self) -> str:
        return self.response.headers.get("content-type", "")


class ResponseView:
    def __init__(self, recorded: Recorded):
        self.status_code = recorded.status_code
        self.headers = recorded.headers
        self.data = recorded.data
        self.content_type = recorded.response_content_type


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    daemon, client = await open_api(tmp_path, {"assistant": AGENT}, token=TOKEN)
    yield client
    await client.aclose()
    await daemon.shutdown()


async def record(client: httpx.AsyncClient) -> list[httpx.Response]:
    """One of every kind of answer, from a real daemon."""
    said = {"conversation_id": "demo", "text": "remember city: Lisbon"}
    chat = {"model": "assistant", "messages": [{"role": "user", "content": "hello"}]}
    get, post = client.get, client.post
    return [
        await get("/healthz"),
        await get("/agents", headers=BEARER),
        await get("/agents"),  # 401, agentd's error shape
        await post("/agents/assistant/messages", json=said, headers=BEARER),
        await post("/agents/assistant/messages", params={"stream": "true"}, json=said, headers=BEARER),
        await post("/agents/assistant/messages", json={"text": 5}, headers=BEARER),  # 422
        await get("/agents/assistant/runs", headers=BEARER),
        await get("/agents/assistant/conversations", headers=BEARER),
        await get("/agents/assistant/conversations/webhook:demo", headers=BEARER),
        await get("/agents/assistant/status", params={"conversation_key": "webhook:demo"}, headers=BEARER),
        await get("/agents/assistant/tools", headers=BEARER),
        await get("/agents/assistant/approvals", headers=BEARER),
        await get("/agents/assistant/questions", headers=BEARER),
        await post("/agents/assistant/questions/abcdef", json={"action": "decline"}, headers=BEARER),  # 404
        await get("/agents/nobody/runs", headers=BEARER),  # 404
        await get("/audit", headers=BEARER),
        await get("/metrics", headers=BEARER),
        await get("/v1/models", headers=BEARER),
        await get("/v1/models/assistant", headers=BEARER),
        await get("/v1/models", headers={"Authorization": "Bearer wrong"}),  # 401, OpenAI's error shape
        await post("/v1/chat/completions", json={**chat, "temperature": 0.5, "stop": "x"}, headers=BEARER),
        await post(
            "/v1/chat/completions",
            json={**chat, "stream": True, "stream_options": {"include_usage": True}},
            headers=BEARER,
        ),
        await post("/v1/chat/completions", json={**chat, "n": 2}, headers=BEARER),  # 400
        await post("/v1/chat/completions", json={**chat, "model": "nobody"}, headers=BEARER),  # 404
    ]


async def test_the_document_is_valid_openapi(secured: httpx.AsyncClient) -> None:
    doc: dict[str, Any] = (await secured.get("/openapi.json", headers=BEARER)).json()
    validate(doc)
    assert doc["info"]["license"] == {"name": "MIT", "identifier": "MIT"}
    assert doc["servers"] == [{"url": "/", "description": "the daemon that serves this document"}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    stream = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    assert {"type": "string", "description": "the whole stream, as text"} in stream["schema"]["anyOf"]
    answered = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]
    assert {"X-Agentd-Conversation", "x-agentd-usage-estimated", "x-agentd-ignored"} <= set(
        answered["headers"]
    )


async def test_every_recorded_response_matches_the_document(secured: httpx.AsyncClient) -> None:
    doc = (await secured.get("/openapi.json", headers=BEARER)).json()
    # Server-Sent Events are UTF-8 text (the SSE specification): read as text/plain is, not as bytes
    api = OpenAPI.from_dict(
        doc, config=Config(extra_media_type_deserializers={"text/event-stream": plain_loads})
    )
    exchanges = await record(secured)
    statuses = {r.status_code for r in exchanges}
    assert {200, 400, 401, 404} <= statuses  # (422 is answered as 400 on /v1, as 422 elsewhere)
    assert any(r.headers["content-type"].startswith("text/event-stream") for r in exchanges)
    failures = []
    for response in exchanges:
        recorded = Recorded(response)
        try:
            api.validate_response(recorded, ResponseView(recorded))
        except Exception as e:  # the validator's own error types; each is reported with its exchange
            failures.append(
                f"{recorded.method.upper()} {recorded.path} {response.status_code}: {e!r} {e.__cause__!r}"
            )
    assert failures == []
