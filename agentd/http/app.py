"""The daemon's HTTP API (FastAPI), served inside the daemon's event loop.

Every bad input gets a 4xx with a reason: 400 malformed JSON or query,
401 missing/wrong bearer token, 404 unknown agent or route, 413 too large,
422 a field that fails validation, 503 an agent that cannot serve now.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentd.engine.agent import Agent
from agentd.errors import StoreError
from agentd.events import CONVERSATION_ID_RE, InboundEvent, Reply, is_conversation_key
from agentd.http.directory import AgentDirectory
from agentd.http.tools_routes import add_tool_routes
from agentd.http.ui import add_ui_routes

log = logging.getLogger(__name__)
MAX_TEXT = 32_000
USER_ID_RE = re.compile(r"^\S{1,128}$")


class ApiError(Exception):
    def __init__(self, status: int, reason: str, **extra: Any):
        self.status, self.reason, self.extra = status, reason, extra


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

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.reason, **exc.extra}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "invalid request", "detail": _reasons(exc.errors())}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError) -> JSONResponse:
        log.error("store error on %s: %s", request.url.path, exc)
        return JSONResponse({"error": f"the agent's data file is unavailable: {exc}"}, status_code=503)

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

    @app.post(
        "/agents/{agent}/messages",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=[Depends(require_token)],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": MessageIn.model_json_schema()}},
            }
        },
    )
    async def post_message(agent: str, request: Request) -> MessageOut:
        message = await _read_json(request, MessageIn, directory.max_body_bytes)
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
        return _out(await target.handle(event))

    @app.post(
        "/agents/{agent}/repl",
        response_model=MessageOut,
        tags=["agents"],
        dependencies=[Depends(require_token)],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ReplIn.model_json_schema()}},
            }
        },
    )
    async def post_repl(agent: str, request: Request) -> MessageOut:
        """`agentd chat` beside a running daemon: the same repl:<session> conversation as in-process."""
        line = await _read_json(request, ReplIn, directory.max_body_bytes)
        event = InboundEvent(agent, f"repl:{line.session}", line.text, "repl", user_id="local")
        return _out(await agent_or_404(agent).handle(event))

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
    add_tool_routes(app, agent_or_404, require_token, ApiError)
    add_ui_routes(app, directory)
    return app


M = TypeVar("M", bound=BaseModel)


async def _read_json(request: Request, model: type[M], limit: int) -> M:
    """The body as `model`: 413 too large, 400 not a JSON object, 422 a field that fails validation."""
    body = await _read_body(request, limit)
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"malformed JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ApiError(400, f"expected a JSON object {{{', '.join(model.model_fields)}}}")
    if isinstance(raw.get("text"), str) and len(raw["text"]) > MAX_TEXT:
        raise ApiError(413, f"text is {len(raw['text'])} characters; the limit is {MAX_TEXT}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ApiError(422, "invalid request", detail=_reasons(e.errors())) from None


def _out(reply: Reply) -> MessageOut:
    return MessageOut(
        reply=reply.text,
        run_id=reply.run_id,
        conversation_key=reply.conversation_key,
        error=reply.error,
        approval=reply.approval,
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _reasons(errors: Any) -> list[dict[str, Any]]:
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        out.append({"field": ".".join(loc), "reason": err.get("msg", "invalid")})
    return out


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
