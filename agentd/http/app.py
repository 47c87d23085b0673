"""The daemon's HTTP API (FastAPI), served inside the daemon's event loop.

Every bad input gets a 4xx with a reason: 400 malformed JSON or query,
401 missing/wrong bearer token, 404 unknown agent or route, 413 too large,
422 a field that fails validation, 503 an agent that cannot serve now.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from datetime import UTC, datetime
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentd.engine.agent import Agent
from agentd.errors import StoreError
from agentd.events import CONVERSATION_ID_RE, InboundEvent, Reply, ReplySink, is_conversation_key
from agentd.http.bodies import MAX_TEXT, ApiError, read_json, reasons
from agentd.http.directory import AgentDirectory
from agentd.http.openai_api import add_openai_routes, is_openai_path, openai_error
from agentd.http.streaming import TurnStream, reply_events
from agentd.http.tools_routes import add_tool_routes
from agentd.http.ui import add_ui_routes

log = logging.getLogger(__name__)
USER_ID_RE = re.compile(r"^\S{1,128}$")


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(pattern=CONVERSATION_ID_RE.pattern, description="1-128 of [A-Za-z0-9_.:-]")
    text: str = Field(min_length=1)
    user_id: str | None = Field(default=None, min_length=1, max_length=128)
    sent_at: datetime | None = Field(
        default=None,
        description="when the person sent the message (ISO-8601, UTC when no offset is given, or epoch "
        "seconds); episodic memories of it carry this time",
    )


class ReplIn(BaseModel):
    """A line of `agentd chat` sent to the daemon that owns the data folder (conversation repl:<session>)."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(pattern=CONVERSATION_ID_RE.pattern, description="1-128 of [A-Za-z0-9_.:-]")
    text: str = Field(min_length=1, max_length=MAX_TEXT)


class MessageOut(BaseModel):
    reply: str
    run_id: str | None
    conversation_key: str
    error: str | None = None
    approval: str | None = Field(
        default=None, description="the id of a tool call waiting for approval (the reply says which)"
    )


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_since(value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, f"since: expected an ISO-8601 time or epoch seconds, got {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def create_app(directory: AgentDirectory) -> FastAPI:
    app = FastAPI(
        title="agentd",
        version="0.1.0",
        description="Talk to agentd's agents and read their runs, memory and audit trail.",
    )

    def refusal(request: Request, status: int, reason: str, **extra: Any) -> JSONResponse:
        if is_openai_path(request.url.path):  # OpenAI's clients read OpenAI's error shape
            return openai_error(status, reason, **extra)
        return JSONResponse({"error": reason, **extra}, status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return refusal(request, exc.status, exc.reason, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return refusal(request, 422, "invalid request", detail=reasons(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = refusal(request, exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError) -> JSONResponse:
        log.error("store error on %s: %s", request.url.path, exc)
        return refusal(request, 503, f"the agent's data file is unavailable: {exc}")

    async def require_token(request: Request) -> None:
        if directory.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            await directory.audit_auth_failure(request.url.path, "missing token", _client(request))
            raise ApiError(401, "missing bearer token: send Authorization: Bearer <http.token>")
        if not hmac.compare_digest(given.encode(), directory.token.encode()):
            await directory.audit_auth_failure(request.url.path, "wrong token", _client(request))
            raise ApiError(401, "wrong bearer token")

    def check_key(conversation_key: str) -> None:
        if not is_conversation_key(conversation_key):
            raise ApiError(
                400,
                f"not a conversation key: {conversation_key!r} (expected <channel>:<id>, e.g. webhook:t-1)",
            )

    def agent_or_404(name: str) -> Agent:
        agent = directory.agent(name)
        if agent is None:
            raise ApiError(404, f"no agent named {name!r}")
        if agent.status != "running":
            reason = agent.lifecycle.last_error
            raise ApiError(503, f"agent {name!r} is {agent.status}" + (f": {reason}" if reason else ""))
        return agent

    @app.get("/healthz", tags=["daemon"])
    async def healthz() -> dict[str, Any]:
        agents = directory.describe_agents()
        return {"ok": True, "agents": {a["name"]: a["status"] for a in agents}}

    turns: set[asyncio.Task[None]] = set()  # streamed turns, alive whether or not their client stays

    async def streamed(target: Agent, event: InboundEvent) -> StreamingResponse:
        await target.ready()  # data that cannot be opened is a 503 now, not an event in a 200 stream

        async def run(sink: ReplySink) -> Reply:
            return await target.handle(event, sink=sink)

        return reply_events(TurnStream(run, turns), lambda reply: _out(reply).model_dump())

    @app.post(
        "/agents/{agent}/messages",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=[Depends(require_token)],
        openapi_extra=_message_openapi(MessageIn),
    )
    async def post_message(
        agent: str, request: Request, stream: bool = Query(False, description=STREAM_DOC)
    ) -> Any:
        message = await read_json(request, MessageIn, directory.max_body_bytes)
        target = agent_or_404(agent)
        if not directory.has_webhook(agent):
            raise ApiError(404, f"agent {agent!r} has no webhook channel: add `channels: {{webhook: {{}}}}`")
        event = InboundEvent(
            agent=agent,
            conversation_key=f"webhook:{message.conversation_id}",
            text=message.text,
            channel="webhook",
            user_id=message.user_id,
            sent_at=_epoch(message.sent_at),
        )
        if stream:
            return await streamed(target, event)
        return _out(await target.handle(event))

    @app.post(
        "/agents/{agent}/repl",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=[Depends(require_token)],
        openapi_extra=_message_openapi(ReplIn),
    )
    async def post_repl(
        agent: str, request: Request, stream: bool = Query(False, description=STREAM_DOC)
    ) -> Any:
        """`agentd chat` beside a running daemon: the same repl:<session> conversation as in-process."""
        line = await read_json(request, ReplIn, directory.max_body_bytes)
        event = InboundEvent(agent, f"repl:{line.session}", line.text, "repl", user_id="local")
        target = agent_or_404(agent)
        if stream:
            return await streamed(target, event)
        return _out(await target.handle(event))

    @app.get("/agents", tags=["agents"], dependencies=[Depends(require_token)])
    async def agents() -> dict[str, Any]:
        """Every agent; what the daemon holds for all of them (open files, hot threads' memory); memory
        models that failed lately."""
        return {
            "daemon": directory.describe_daemon(),
            "agents": directory.describe_agents(),
            "memory_models": directory.memory_models(),
        }

    @app.get("/audit", tags=["daemon"], dependencies=[Depends(require_token)])
    async def audit(
        agent: str | None = None,
        kind: str | None = None,
        since: str | None = None,
        limit: int = Query(default=100, ge=1, le=1000),
        tool: str | None = Query(
            default=None, description="only events about this tool (e.g. files__write_file)"
        ),
    ) -> dict[str, Any]:
        if agent is not None and directory.agent(agent) is None and agent not in _names(directory):
            raise ApiError(404, f"no agent named {agent!r}")
        events = await directory.query_audit(agent, kind, parse_since(since), limit, tool)
        return {"events": [{**e, "ts": iso(e["ts"])} for e in events]}

    @app.get("/agents/{agent}/runs", tags=["agents"], dependencies=[Depends(require_token)])
    async def runs(
        agent: str, conversation_key: str | None = None, limit: int = Query(default=50, ge=1, le=1000)
    ) -> dict[str, Any]:
        rows = await agent_or_404(agent).runs(conversation_key, limit)
        return {"runs": [_run_out(r) for r in rows]}

    @app.delete(
        "/agents/{agent}/people/{user_id}/episodes", tags=["agents"], dependencies=[Depends(require_token)]
    )
    async def forget_episodes(agent: str, user_id: str, request: Request) -> dict[str, Any]:
        """Delete every episode of one person (a data-subject request); audited with the count, never text."""
        if not USER_ID_RE.match(user_id):
            raise ApiError(400, f"not a user id: {user_id!r} (1-128 characters, no spaces)")
        deleted = await agent_or_404(agent).forget_episodes(user_id, by=f"http:{_client(request)}")
        return {"agent": agent, "user_id": user_id, "deleted": deleted}

    @app.get("/agents/{agent}/status", tags=["agents"], dependencies=[Depends(require_token)])
    async def status(
        agent: str, conversation_key: str = Query(min_length=3), user_id: str | None = None
    ) -> dict[str, Any]:
        target = agent_or_404(agent)
        check_key(conversation_key)
        return await target.status_of(conversation_key, user_id)

    # Before the transcript route below: its `{conversation_key:path}` would take ".../memory" as a key.
    @app.get(
        "/agents/{agent}/conversations/{conversation_key:path}/memory",
        tags=["agents"],
        dependencies=[Depends(require_token)],
    )
    async def conversation_memory(agent: str, conversation_key: str) -> dict[str, Any]:
        """The memory inspector: per layer, what the model will see on the next turn."""
        target = agent_or_404(agent)
        check_key(conversation_key)
        return await target.inspect(conversation_key)

    @app.get(
        "/agents/{agent}/conversations/{conversation_key:path}",
        tags=["agents"],
        dependencies=[Depends(require_token)],
    )
    async def conversation(agent: str, conversation_key: str) -> dict[str, Any]:
        target = agent_or_404(agent)
        check_key(conversation_key)
        return await target.next_prompt(conversation_key)

    async def platform(request: Request) -> Any:
        handler = directory.platform_endpoint(request.url.path)
        if handler is None:
            raise ApiError(404, f"no channel listens on {request.url.path}")
        return await handler(request)

    # Platform callbacks carry their own proof (Slack's signature, Telegram's secret token),
    # so they are not behind the bearer token: Slack and Telegram cannot send one.
    app.add_api_route("/slack/{agent}/events", platform, methods=["POST"], include_in_schema=False)
    app.add_api_route("/telegram/{agent}", platform, methods=["POST"], include_in_schema=False)
    add_openai_routes(app, directory, require_token, turns)
    add_tool_routes(app, agent_or_404, require_token, ApiError)
    add_ui_routes(app, directory)
    return app


STREAM_DOC = (
    "true: answer as Server-Sent Events while the model writes: `delta` {text} pieces, `restart` {} when "
    "the text so far was not the reply (the model went on to call a tool), then `reply` (the JSON below) "
    "or `error` {error}. A client that disconnects loses nothing: the turn completes and is stored."
)


def _message_openapi(body: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": body.model_json_schema()}},
        },
        "responses": {"200": {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
    }


def _out(reply: Reply) -> MessageOut:
    return MessageOut(
        reply=reply.text,
        run_id=reply.run_id,
        conversation_key=reply.conversation_key,
        error=reply.error,
        approval=reply.approval,
    )


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _names(directory: AgentDirectory) -> set[str]:
    return {a["name"] for a in directory.describe_agents()}


def _run_out(run: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "conversation_key",
        "trigger",
        "model",
        "status",
        "input_tokens",
        "output_tokens",
        "tokens_estimated",
        "duration_ms",
        "error",
        "parent_run_id",
    )
    out = {k: run[k] for k in keys}
    out["started_at"] = iso(run["started_at"])
    return out


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
