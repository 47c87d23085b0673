"""The daemon's HTTP API (FastAPI), served inside the daemon's event loop.

Every bad input gets a 4xx with a reason (`errors.py`: one body shape, documented per
route): 400 malformed JSON or query, 401 missing/wrong bearer token, 404 unknown agent
or route, 413 too large, 422 a field that fails validation, 503 an agent that cannot
serve now. The routes live by what they do: talking to agents here, reading in
`reads.py`, deleting in `deletes.py`, the OpenAPI and /docs in `docs.py`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from agentd import __version__
from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.http.auth import bearer_token
from agentd.http.bodies import (
    MessageIn,
    MessageOut,
    ReplIn,
    agent_param,
    body_schema,
    read_json,
    reply_out,
    sse_event_schema,
)
from agentd.http.control import add_control_routes, refuse_if_held
from agentd.http.deletes import add_delete_routes
from agentd.http.directory import AgentDirectory
from agentd.http.docs import add_docs_routes
from agentd.http.errors import ApiError, ErrorOut, errors, install_error_handlers
from agentd.http.idempotency import (
    HEADER,
    KEY_DOC,
    KEY_PATTERN,
    REPLAYED_HEADER,
    Idempotency,
    key_of,
    replay_headers,
)
from agentd.http.jobs_routes import add_job_routes
from agentd.http.lookup import running_agent
from agentd.http.media_in import attachments_of
from agentd.http.media_out import add_media_routes
from agentd.http.openai_api import add_openai_routes, is_openai_path, openai_error
from agentd.http.people import add_people_routes
from agentd.http.reads import add_read_routes
from agentd.http.responses_api import add_responses_routes
from agentd.http.streaming import TurnStream, reply_events
from agentd.http.tools_routes import add_tool_routes
from agentd.http.ui import add_ui_routes
from agentd.http.usage import add_usage_routes
from agentd.http.webhook_in import multipart_schema, read_message

READY_503 = "Not ready: the store does not answer, the agents are still loading, or the daemon is stopping"


class ReadyOut(BaseModel):
    ready: bool = Field(description="always true in a 200")
    daemon: str = Field(description="which daemon answered (host:pid:random)")


def create_app(directory: AgentDirectory) -> FastAPI:
    app = FastAPI(
        title="agentd",
        version=__version__,
        description="Talk to agentd's agents and read their runs, memory and audit trail.",
        # served by docs.py behind the token, from files installed with agentd (no CDN)
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_error_handlers(app, special=(is_openai_path, openai_error))  # OpenAI's clients read its shape
    require_token = bearer_token(directory)
    protected = [Depends(require_token)]

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @app.get(
        "/healthz", tags=["daemon"], summary="Liveness, and which daemon answered (never needs the token)"
    )
    async def healthz() -> dict[str, Any]:
        agents = directory.describe_agents()
        # `daemon`: behind a load balancer over several daemons, which one this was
        return {"ok": True, "daemon": directory.daemon_id, "agents": {a["name"]: a["status"] for a in agents}}

    @app.get(
        "/readyz",
        tags=["daemon"],
        response_model=ReadyOut,
        responses={503: {"model": ErrorOut, "description": READY_503}},
        summary="Readiness: the store answers and the agents are loaded (never needs the token)",
    )
    async def readyz() -> Any:
        """For a load balancer or Kubernetes' readinessProbe (/healthz is liveness: the process runs):
        200 while this daemon can serve, 503 with the reason while it cannot (its store does not
        answer, it is still loading its agents, it is stopping)."""
        problem = await directory.readiness()
        if problem is not None:
            raise ApiError(503, f"not ready: {problem}")
        return {"ready": True, "daemon": directory.daemon_id}

    @app.get(
        "/metrics",
        tags=["daemon"],
        dependencies=protected,
        responses={**errors(), 200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
        summary="Prometheus metrics",
    )
    async def metrics() -> Response:
        body, content_type = directory.metrics_text()
        return Response(body, media_type=content_type)

    turns: set[asyncio.Task[None]] = set()  # streamed turns, alive whether or not their client stays
    once = Idempotency()  # requests named by an Idempotency-Key: a retry gets the first one's reply

    async def streamed(target: Agent, event: InboundEvent) -> StreamingResponse:
        await target.ready()  # data that cannot be opened is a 503 now, not an event in a 200 stream

        async def run(sink: ReplySink) -> Reply:
            return await target.handle(event, sink=sink)

        return reply_events(TurnStream(run, turns), lambda reply: reply_out(reply, target.name).model_dump())

    @app.post(
        "/agents/{agent}/messages",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=protected,
        responses={**errors(400, 404, 409, 413, 422, 503), 200: {"headers": REPLAYED}},
        openapi_extra=streamable(MessageIn, multipart=True),
    )
    async def post_message(
        request: Request,
        agent: str = agent_param(),
        stream: bool = Query(False, description=STREAM_DOC),
        idempotency_key: str | None = Header(None, alias=HEADER, pattern=KEY_PATTERN, description=KEY_DOC),
    ) -> Any:
        """A message to the agent's webhook channel (conversation `webhook:<conversation_id>`); text starting
        with `/` runs a command. With an Idempotency-Key (or `message_id`), a retry is answered with the
        first request's reply and the message is stored once."""
        target = running_agent(directory, agent)
        # JSON within http.max_body_bytes, or multipart with files within media.max_message_bytes
        message, files = await read_message(request, directory.max_body_bytes, target.spec.media)
        if not directory.has_webhook(agent):
            raise ApiError(404, f"agent {agent!r} has no webhook channel: add `channels: {{webhook: {{}}}}`")
        key = key_of(idempotency_key, message.message_id)
        event = InboundEvent(
            agent=agent,
            conversation_key=f"webhook:{message.conversation_id}",
            text=message.text,
            channel="webhook",
            user_id=message.user_id,
            event_id=key,
            sent_at=message.sent_at,
            attachments=files,
        )
        await refuse_if_held(target, event)  # not a request hanging until the approval is answered
        if key is not None:

            async def handle(sink: ReplySink | None = None) -> Reply:
                assert key is not None
                return await once.once(
                    (agent, "webhook", key),
                    event.conversation_key,
                    lambda: target.handle(event, sink=sink),
                    lambda: target.delivered("webhook", key),
                )

            if stream:
                await target.ready()
                return reply_events(
                    TurnStream(handle, turns), lambda reply: reply_out(reply, agent).model_dump()
                )
            reply = await handle()
            return JSONResponse(reply_out(reply, agent).model_dump(), headers=replay_headers(reply))
        if stream:
            return await streamed(target, event)
        return reply_out(await target.handle(event), agent)

    @app.post(
        "/agents/{agent}/repl",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=protected,
        responses=errors(400, 404, 413, 422, 503),
        openapi_extra=streamable(ReplIn),
    )
    async def post_repl(
        request: Request, agent: str = agent_param(), stream: bool = Query(False, description=STREAM_DOC)
    ) -> Any:
        """`agentd chat` beside a running daemon: the same repl:<session> conversation as in-process."""
        line = await read_json(request, ReplIn, directory.max_body_bytes)
        files = attachments_of(line.attachments, ())  # /attach: the file's bytes, never a URL
        event = InboundEvent(
            agent, f"repl:{line.session}", line.text, "repl", user_id="local", attachments=files
        )
        target = running_agent(directory, agent)
        if stream:
            return await streamed(target, event)
        return reply_out(await target.handle(event), agent)

    # before the read routes: .../conversations/{key}/stop is matched (and its Allow header said) before
    # .../conversations/{key:path} would take "/stop" as part of the key
    add_control_routes(app, directory, protected)
    add_read_routes(app, directory, protected)
    add_delete_routes(app, directory, protected)
    add_people_routes(app, directory, protected)
    add_usage_routes(app, directory, protected)

    async def platform(request: Request) -> Any:
        handler = directory.platform_endpoint(request.url.path)
        if handler is None:
            raise ApiError(404, f"no channel listens on {request.url.path}")
        return await handler(request)

    # Platform callbacks carry their own proof (Slack's signature, Telegram's secret token),
    # so they are not behind the bearer token: Slack and Telegram cannot send one.
    app.add_api_route("/slack/{agent}/events", platform, methods=["POST"], include_in_schema=False)
    app.add_api_route("/telegram/{agent}", platform, methods=["POST"], include_in_schema=False)
    add_openai_routes(app, directory, require_token, turns, once)
    add_responses_routes(app, directory, require_token, turns, once)
    add_tool_routes(app, directory, protected)
    add_media_routes(app, directory, protected)
    add_job_routes(app, directory, protected)
    add_ui_routes(app, directory)
    add_docs_routes(app, directory, require_token)
    return app


REPLAYED = {
    REPLAYED_HEADER: {
        "schema": {"type": "string", "enum": ["true"]},
        "description": "present on the answer to a retry: the reply is the first request's (Idempotency-Key)",
    }
}
STREAM_DOC = (
    "true: answer as Server-Sent Events while the model writes: `delta` {text} pieces, `restart` {} when "
    "the text so far was not the reply (the model went on to call a tool), `progress` {text} when a tool's "
    "MCP server says how far its call is, then `reply` (the JSON below) "
    "or `error` {error}. A client that disconnects loses nothing: the turn completes and is stored."
)


def streamable(model: type[MessageIn] | type[ReplIn], multipart: bool = False) -> dict[str, Any]:
    """The body schema (and with `multipart`, the webhook's upload beside the JSON), and the events a
    `?stream=true` call answers with."""
    extra = body_schema(model, stream=sse_event_schema(["delta", "restart", "progress", "reply", "error"]))
    if multipart:
        extra["requestBody"]["content"]["multipart/form-data"] = {
            "schema": multipart_schema(),
            "encoding": {"attachments": {"contentType": "application/json"}},
        }
    return extra
