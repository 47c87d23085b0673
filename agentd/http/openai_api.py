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
With an `Idempotency-Key` header (or `message_id`), a retry is answered with the
first request's reply and stores nothing (idempotency.py): the official client
retries timeouts and 5xx with the headers it was given.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal
from urllib.parse import quote

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from agentd.engine.agent import Agent
from agentd.engine.turn import TurnLimits
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.http.bodies import read_json
from agentd.http.control import v1_event
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError
from agentd.http.idempotency import (
    HEADER,
    KEY_DOC,
    KEY_PATTERN,
    REPLAYED_HEADER,
    Idempotency,
    key_of,
    replay_headers,
)
from agentd.http.openai_call import CHANNEL, CONVERSATION_HEADER, Call, ChatCompletionIn
from agentd.http.openai_params import completion_docs, finish_reason, ignored_headers, turn_limits
from agentd.http.openai_usage import UsageChunk, UsageOut, stream_usage, usage_of
from agentd.http.streaming import SSE_HEADERS, Failed, Restart, TurnStream
from agentd.http.webhook_in import body_limit
from agentd.messages import Message

# What a header value may carry as is: printable ASCII but `%`, which starts an escape (RFC 3986).
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")
CONVERSATION_HEADER_DOC = (
    "the conversation's key (openai:<name>), percent-encoded as UTF-8 (RFC 3986) where it has a "
    "character outside printable ASCII, or `%`: an HTTP header carries Latin-1 at most"
)


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
    return AsciiJSONResponse(body, status_code=status, headers=headers)


class AsciiJSONResponse(JSONResponse):
    """JSON written in ASCII (other characters as \\u escapes): rendering it cannot fail, whatever the
    text holds (a lone surrogate in what the model wrote), so a turn already committed is never
    answered with a 500 that a client's retry would store again."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def conversation_header(key: str) -> str:
    """The X-Agentd-Conversation response header: the key, percent-encoded where a header cannot
    carry it (a `user` like `ana-✓` would otherwise fail the response after the turn was stored)."""
    return quote(key, safe=_HEADER_SAFE)


def openai_agent(directory: AgentDirectory, name: str) -> Agent:
    """The agent a /v1 request names as its `model`: one open to HTTP (with the webhook channel), running."""
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


def served_agents(directory: AgentDirectory) -> list[str]:
    """The agents a /v1 client can talk to: running, with the webhook channel."""
    names = sorted(a["name"] for a in directory.describe_agents())
    return [
        n
        for n in names
        if (a := directory.agent(n)) is not None and a.status == "running" and directory.has_webhook(n)
    ]


def largest_body(directory: AgentDirectory) -> int:
    """A /v1 body's limit: the body names the agent, so it may be as large as the largest files a
    served agent takes (http.max_body_bytes at least)."""
    agents = [a for n in served_agents(directory) if (a := directory.agent(n)) is not None]
    return max([directory.max_body_bytes] + [body_limit(0, a.spec.media) for a in agents])


def add_openai_routes(
    app: FastAPI,
    directory: AgentDirectory,
    require_token: Callable[[Request], Awaitable[None]],
    turns: set[asyncio.Task[None]],
    once: Idempotency,
) -> None:
    def agent_of(name: str) -> Agent:
        return openai_agent(directory, name)

    def served() -> list[str]:
        return served_agents(directory)

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
        responses={
            **openai_errors(404, 409, 413, 502, 503),
            200: {
                "headers": {
                    CONVERSATION_HEADER: {
                        "schema": {"type": "string"},
                        "description": CONVERSATION_HEADER_DOC,
                    },
                    REPLAYED_HEADER: {
                        "schema": {"type": "string", "enum": ["true"]},
                        "description": "present on the answer to a retry: the first request's reply",
                    },
                }
            },
        },
        openapi_extra=completion_docs(ChatCompletionIn, CONVERSATION_HEADER, CONVERSATION_HEADER_DOC),
    )
    async def chat_completions(
        request: Request,
        idempotency_key: str | None = Header(None, alias=HEADER, pattern=KEY_PATTERN, description=KEY_DOC),
    ) -> Any:
        """Talk to an agent as to an OpenAI model (see the module docstring for the rules)."""
        body = await read_json(request, ChatCompletionIn, largest_body(directory))
        agent = agent_of(body.model)
        call = Call(body, request.headers.get(CONVERSATION_HEADER), agent.spec.media.allowed_urls)
        key = key_of(idempotency_key, body.message_id)
        stateless = call.earlier is not None
        limits = turn_limits(body.model_extra or {})
        event = await v1_event(agent, call.key, call.text, call.user, call.attachments, key, stateless)

        run = once_turn(agent, event, call.earlier, call.instructions, limits, once, CHANNEL, key)

        headers = {CONVERSATION_HEADER: conversation_header(call.key)} | ignored_headers(
            body.model_extra or {}
        )
        if body.stream:
            await agent.ready()  # data that cannot be opened is a 503 now, not an error chunk in a 200
            wanted = bool(body.stream_options and body.stream_options.include_usage)
            chunks = _chunks(TurnStream(run, turns), agent.name, stream_usage(agent, wanted, call.text))
            return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS | headers)
        reply = await run(None)
        headers |= replay_headers(reply)
        if reply.error == "too_large":  # the message alone is past the model's window: as OpenAI says it
            return openai_error(
                400, reply.text, code="context_length_exceeded", param="messages", headers=headers
            )
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
        return AsciiJSONResponse(out.model_dump(), headers=headers | used.headers())


def once_turn(
    agent: Agent,
    event: InboundEvent,
    earlier: list[Message] | None,
    instructions: str,
    limits: TurnLimits,
    once: Idempotency,
    endpoint: str,
    key: str | None,
) -> Callable[[ReplySink | None], Awaitable[Reply]]:
    """The turn of a /v1 request (stateless when the request carried the conversation, `earlier`),
    answered once per Idempotency-Key of `endpoint` (idempotency.py) when it has one."""

    async def turn(sink: ReplySink | None) -> Reply:
        if earlier is not None:
            return await agent.answer_stateless(
                event, earlier, sink=sink, instructions=instructions, limits=limits
            )
        return await agent.handle(event, sink=sink, instructions=instructions, limits=limits)

    async def run(sink: ReplySink | None) -> Reply:
        if key is None:
            return await turn(sink)
        # a stateless call stores nothing: its key is honoured in this process only
        stored = None if earlier is not None else (lambda: agent.delivered(CHANNEL, key))
        return await once.once(
            (agent.name, endpoint, key), event.conversation_key, lambda: turn(sink), stored
        )

    return run


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
    return f"data: {json.dumps(payload)}\n\n"  # ASCII: no text the model wrote can fail the stream
