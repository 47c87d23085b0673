"""An OpenAI-compatible endpoint: any OpenAI client, SDK or chat UI talks to an agent by its name.

`POST /v1/chat/completions` with `model` = the agent, `GET /v1/models` (and
`/v1/models/{agent}`) listing the agents open to HTTP (those with the webhook
channel), behind the same bearer token as every other route (an OpenAI client
sends its api_key as exactly that).

A conversation is named by the `X-Agentd-Conversation` header, else the
`user` field: key `openai:<name>`. Then only the last message (the person's)
is the new turn; history comes from agentd, as in every channel (commands
included). Without a name the call is stateless: the messages sent are the
whole conversation, nothing is kept but the run. Either way the request's
system (and developer) messages are added to the agent's purpose for that
call only; the purpose comes first and always stays. The agent's file decides
the model, its sampling and its tools: `stop` and `max_tokens` reach the model,
other options are ignored (named in `x-agentd-ignored`), and what agentd cannot
honour (`n` > 1, client-side `tools`, a non-text `response_format`, `logprobs`,
audio, tool messages) is refused with a reason (openai_params.py).

`stream: true` answers with OpenAI's chunk stream. Text the model writes
before it calls one of the agent's tools streams too, followed by a blank line
(a chunk cannot be taken back); the non-streamed `content` is the final answer
only. Errors are OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`;
a model that failed is a 502 with `x-should-retry: false` (the person's
message is already stored in a named conversation: a retry would say it twice).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.http.bodies import MAX_TEXT, read_json
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError
from agentd.http.openai_params import completion_docs, finish_reason, ignored_headers, turn_limits
from agentd.http.openai_usage import UsageChunk, UsageOut, stream_usage, usage_of
from agentd.http.streaming import SSE_HEADERS, Failed, Restart, TurnStream
from agentd.messages import Message

CHANNEL = "openai"
CONVERSATION_HEADER = "X-Agentd-Conversation"
STATELESS_KEY = f"{CHANNEL}:(stateless)"  # "(" never appears in a conversation name: no named one collides
NAME_CHARS = 128


class TextPartIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPartIn] | None = None
    tool_calls: list[Any] | None = None


class StreamOptionsIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = None


class ChatCompletionIn(BaseModel):
    """A Chat Completions request; options not listed here are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="the agent's name")
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptionsIn | None = None
    user: str | None = Field(
        default=None, description="names the conversation (openai:<user>) unless the header does; the speaker"
    )
    n: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None


class AssistantOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChoiceOut(BaseModel):
    index: int = 0
    message: AssistantOut
    finish_reason: str = "stop"
    logprobs: None = None


class ChatCompletionOut(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChoiceOut]
    usage: UsageOut | None = None


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "agentd"


class ModelsOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error or api_error")
    param: str | None = None
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    """How the /v1 routes refuse: OpenAI's error shape, which its clients read."""

    error: OpenAIErrorBody


def openai_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` of a /v1 route: each refusal documented in OpenAI's shape (a field that fails
    validation is a 400 there, as in OpenAI's API; 422 is listed only so no other shape is)."""
    return {code: {"model": OpenAIErrorOut} for code in sorted({400, 401, 422, *statuses})}


def is_openai_path(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def openai_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    detail: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An error as OpenAI sends it. A field that fails validation is a 400 here, as there."""
    if status == 422:
        status = 400
    if detail:
        param = param or detail[0].get("field") or None
        message = f"{message}: " + "; ".join(f"{d['field'] or 'body'}: {d['reason']}" for d in detail)
    kind = "invalid_request_error" if status < 500 else "api_error"
    if status == 401:
        kind, code = "authentication_error", code or "invalid_api_key"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


class _Call:
    """One request read: whose conversation, what is new, what came before, what the caller adds."""

    def __init__(self, body: ChatCompletionIn, header: str | None):
        _refuse_what_agentd_cannot_do(body)
        *earlier, last = body.messages
        self.instructions = "\n\n".join(
            _text(m, i) for i, m in enumerate(body.messages) if m.role in ("system", "developer")
        )
        if last.role != "user":
            raise ApiError(
                400, f"the last message must be the user's new turn, not {last.role!r}", param="messages"
            )
        self.text = _text(last, len(body.messages) - 1)
        if not self.text.strip():
            raise ApiError(400, "the last user message has no text", param="messages")
        if len(self.text) > MAX_TEXT:
            raise ApiError(
                413, f"the last user message is {len(self.text)} characters; the limit is {MAX_TEXT}"
            )
        self.user = _name(body.user, "user")
        named = _name(header, CONVERSATION_HEADER) or self.user
        self.key = f"{CHANNEL}:{named}" if named else STATELESS_KEY
        # Stateless: the caller's conversation so far, without its system messages (they are instructions).
        self.earlier: list[Message] | None = None
        if named is None:
            self.earlier = [
                _message(m, i) for i, m in enumerate(earlier) if m.role not in ("system", "developer")
            ]


def add_openai_routes(
    app: FastAPI,
    directory: AgentDirectory,
    require_token: Callable[[Request], Awaitable[None]],
    turns: set[asyncio.Task[None]],
) -> None:
    def agent_of(name: str) -> Agent:
        agent = directory.agent(name)
        if agent is None or not directory.has_webhook(name):
            raise ApiError(
                404,
                f"The model {name!r} does not exist: it names no agent open to HTTP (GET /v1/models lists them)",
                code="model_not_found",
                param="model",
            )
        if agent.status != "running":
            raise ApiError(503, f"agent {name!r} is {agent.status}")
        return agent

    def served() -> list[str]:
        names = sorted(a["name"] for a in directory.describe_agents())
        return [
            n
            for n in names
            if (a := directory.agent(n)) is not None and a.status == "running" and directory.has_webhook(n)
        ]

    @app.get(
        "/v1/models",
        response_model=ModelsOut,
        tags=["openai"],
        dependencies=[Depends(require_token)],
        responses=openai_errors(),
    )
    async def models() -> ModelsOut:
        """The agents an OpenAI client can talk to, as models."""
        return ModelsOut(data=[ModelOut(id=name) for name in served()])

    @app.get(
        "/v1/models/{model}",
        response_model=ModelOut,
        tags=["openai"],
        dependencies=[Depends(require_token)],
        responses=openai_errors(404, 503),
    )
    async def model(model: str) -> ModelOut:
        agent_of(model)
        return ModelOut(id=model)

    @app.post(
        "/v1/chat/completions",
        response_model=ChatCompletionOut,
        tags=["openai"],
        dependencies=[Depends(require_token)],
        responses=openai_errors(404, 413, 502, 503),
        openapi_extra=completion_docs(ChatCompletionIn, CONVERSATION_HEADER),
    )
    async def chat_completions(request: Request) -> Any:
        """Talk to an agent as to an OpenAI model (see the module docstring for the rules)."""
        body = await read_json(request, ChatCompletionIn, directory.max_body_bytes)
        agent = agent_of(body.model)
        call = _Call(body, request.headers.get(CONVERSATION_HEADER))
        limits = turn_limits(body.model_extra or {})
        event = InboundEvent(agent.name, call.key, call.text, CHANNEL, user_id=call.user)

        async def run(sink: ReplySink | None) -> Reply:
            if call.earlier is not None:
                return await agent.answer_stateless(
                    event, call.earlier, sink=sink, instructions=call.instructions, limits=limits
                )
            return await agent.handle(event, sink=sink, instructions=call.instructions, limits=limits)

        headers = {CONVERSATION_HEADER: call.key} | ignored_headers(body.model_extra or {})
        if body.stream:
            await agent.ready()  # data that cannot be opened is a 503 now, not an error chunk in a 200
            wanted = bool(body.stream_options and body.stream_options.include_usage)
            chunks = _chunks(TurnStream(run, turns), agent.name, stream_usage(agent, wanted, call.text))
            return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS | headers)
        reply = await run(None)
        if reply.error is not None:
            return openai_error(
                502, reply.text, code=reply.error, headers={"x-should-retry": "false"} | headers
            )
        used = await usage_of(agent, reply, call.text)
        out = ChatCompletionOut(
            id=f"chatcmpl-{reply.run_id or uuid.uuid4().hex}",
            created=int(time.time()),
            model=agent.name,
            choices=[ChoiceOut(message=AssistantOut(content=reply.text), finish_reason=finish_reason(reply))],
            usage=used.tokens,
        )
        return JSONResponse(out.model_dump(), headers=headers | used.headers())


async def _chunks(stream: TurnStream, model: str, usage: UsageChunk | None = None) -> AsyncIterator[str]:
    """The turn as OpenAI's chunk stream; the text ends as the reply, whatever was heard on the way.
    With `usage` (stream_options.include_usage), a last chunk with no choices carries the run's tokens."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
    }
    base["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _data(
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        )

    yield chunk({"role": "assistant", "content": ""})
    showing = ""  # the text since the last restart
    async for item in stream.heard():
        if isinstance(item, str):
            showing += item
            yield chunk({"content": item})
        elif isinstance(item, Restart):
            showing = ""
            yield chunk({"content": "\n\n"})
        elif isinstance(item, Reply | Failed):
            if isinstance(item, Failed) or item.error is not None:
                message = item.reason if isinstance(item, Failed) else item.text
                yield _data({"error": {"message": message, "type": "api_error", "param": None, "code": None}})
            else:
                rest = item.text[len(showing) :] if item.text.startswith(showing) else "\n\n" + item.text
                if rest:
                    yield chunk({"content": rest})
                yield chunk({}, finish_reason(item))
                if usage is not None:
                    yield _data({**base, "choices": [], "usage": await usage(item)})
            yield "data: [DONE]\n\n"
        else:
            yield ": ping\n\n"


def _data(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _refuse_what_agentd_cannot_do(body: ChatCompletionIn) -> None:
    if body.n not in (None, 1):
        raise ApiError(400, "n: an agent gives one answer per call; leave n out or set it to 1", param="n")
    if body.tools or body.functions:
        raise ApiError(
            400,
            "tools: an agent calls its own tools (its agent file); client-side tools are not supported",
            param="tools",
        )
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        raise ApiError(400, f"response_format {kind!r} is not supported; only text", param="response_format")


def _text(message: ChatMessageIn, index: int) -> str:
    content = message.content
    if content is None:
        if message.tool_calls:
            raise ApiError(
                400, f"messages[{index}]: tool calls from the client are not supported", param="messages"
            )
        raise ApiError(400, f"messages[{index}]: content is missing", param="messages")
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{index}]: a {part.type!r} content part; agents take text only",
                param="messages",
            )
        texts.append(part.text)
    return "".join(texts)


def _message(message: ChatMessageIn, index: int) -> Message:
    """An earlier message of a stateless call, as agentd's."""
    if message.role == "tool" or message.tool_calls:
        raise ApiError(
            400, f"messages[{index}]: tool messages from the client are not supported", param="messages"
        )
    text = _text(message, index)
    return Message.user(text) if message.role == "user" else Message.assistant(text)


def _name(value: str | None, what: str) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > NAME_CHARS or any(c.isspace() for c in value):
        raise ApiError(400, f"{what}: 1-{NAME_CHARS} characters without spaces (it names the conversation)")
    return value
