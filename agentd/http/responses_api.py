"""The OpenAI Responses API: `POST /v1/responses` (and `GET /v1/responses/{id}`), the default of the
OpenAI Agents SDK and of OpenAI's current examples, answered by an agent named as `model`.

Which conversation a request continues, and what of it is refused, is responses_call.py's. The answer
is a `response` object whose `output` is one assistant message of `output_text`; `usage` is the run's
tokens (input/output), an estimate flagged as on Chat Completions (`x-agentd-usage-estimated`).
`stream: true` answers with the Responses event stream, each event named by its `type` and numbered by
`sequence_number`: response.created, response.in_progress, response.output_item.added,
response.content_part.added, response.output_text.delta ..., response.output_text.done,
response.content_part.done, response.output_item.done, response.completed (or response.failed).
A response is kept with its conversation unless the call was stateless (`store: false`, or the input
carried the history); `GET /v1/responses/{id}` reads a kept one back, from the store, on any daemon.
An `Idempotency-Key` makes a retry get the first reply and store nothing, as on Chat Completions.
A conversation held by a run waiting for an approval is answered at once with a 409 (control.py).
The new message's images, files and audio are its attachments (response_parts.py); the body may be as
large as the files a served agent takes, as on Chat Completions.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import StreamingResponse

from agentd.engine.agent import Agent
from agentd.engine.turn import TurnLimits
from agentd.events import Reply
from agentd.http.bodies import body_schema, read_json, sse_event_schema
from agentd.http.control import v1_event
from agentd.http.directory import AgentDirectory
from agentd.http.idempotency import HEADER, KEY_DOC, KEY_PATTERN, Idempotency, key_of, replay_headers
from agentd.http.openai_api import (
    AsciiJSONResponse,
    conversation_header,
    largest_body,
    once_turn,
    openai_agent,
    openai_error,
    openai_errors,
)
from agentd.http.openai_call import CHANNEL, CONVERSATION_HEADER
from agentd.http.openai_params import ignored_headers
from agentd.http.openai_usage import Usage, usage_of
from agentd.http.responses_call import ResponseCreateIn, ResponseId, ResponsesCall, not_found
from agentd.http.streaming import SSE_HEADERS, Failed, Restart, TurnStream

EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
]


class ResponseShape:
    """The `response` object of one call, in the shape the official SDK's `Response` reads."""

    def __init__(self, rid: ResponseId, body: ResponseCreateIn | None, instructions: str | None):
        self.id, self.agent = str(rid), rid.agent
        self.message_id = "msg_" + rid.event_id[:48]
        self.created_at = int(time.time())
        self.body = body
        self.instructions = instructions or None

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [self.part(text)] if text or status != "in_progress" else [],
        }

    @staticmethod
    def part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def of(
        self,
        status: str,
        text: str | None = None,
        usage: Usage | None = None,
        error: dict[str, Any] | None = None,
        cut_short: bool = False,
    ) -> dict[str, Any]:
        body = self.body
        done = status in ("completed", "incomplete")
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": int(time.time()) if done else None,
            "status": status,
            "model": self.agent,
            "output": [self.message(text or "", "incomplete" if cut_short else "completed")] if done else [],
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if cut_short else None,
            "instructions": self.instructions,
            "metadata": (body.metadata if body else None) or {},
            "previous_response_id": body.previous_response_id if body else None,
            "max_output_tokens": body.max_output_tokens if body else None,
            "store": body.store is not False if body else True,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "temperature": None,
            "top_p": None,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": _usage(usage) if usage is not None else None,
        }


def _usage(used: Usage) -> dict[str, Any]:
    t = used.tokens
    return {
        "input_tokens": t.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": t.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": t.total_tokens,
    }


def add_responses_routes(
    app: FastAPI,
    directory: AgentDirectory,
    require_token: Callable[[Request], Awaitable[None]],
    turns: set[asyncio.Task[None]],
    once: Idempotency,
) -> None:
    def agent_of(name: str) -> Agent:
        return openai_agent(directory, name)

    @app.post(
        "/v1/responses",
        tags=["openai"],
        dependencies=[Depends(require_token)],
        responses=openai_errors(404, 409, 413, 502, 503),
        openapi_extra=body_schema(ResponseCreateIn, stream=sse_event_schema(EVENTS)),
    )
    async def create_response(
        request: Request,
        idempotency_key: str | None = Header(None, alias=HEADER, pattern=KEY_PATTERN, description=KEY_DOC),
    ) -> Any:
        """Talk to an agent through the Responses API (see the module docstring for the rules)."""
        body = await read_json(request, ResponseCreateIn, largest_body(directory))
        agent = agent_of(body.model)
        key = key_of(idempotency_key, None)
        call = ResponsesCall(
            body, request.headers.get(CONVERSATION_HEADER), key, agent.spec.media.allowed_urls
        )
        if call.agent_of_previous is not None and call.agent_of_previous != agent.name:
            raise not_found(call.previous or "", param="previous_response_id")  # another agent's
        rid = ResponseId(agent.name, None if call.stateless else call.key, call.event_id)
        shape = ResponseShape(rid, body, call.instructions)
        limits = TurnLimits(max_output_tokens=body.max_output_tokens)
        event = await v1_event(
            agent, call.key, call.text, call.user, call.attachments, call.event_id, call.stateless
        )

        run = once_turn(agent, event, call.earlier, call.instructions, limits, once, "responses", key)

        headers = ignored_headers(body.model_extra or {})
        if not call.stateless:
            headers[CONVERSATION_HEADER] = conversation_header(call.key)
        if body.stream:
            await agent.ready()  # data that cannot be opened is a 503 now, not a failed event in a 200
            events = _events(TurnStream(run, turns), shape, lambda r: usage_of(agent, r, call.text))
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS | headers)
        reply = await run(None)
        headers |= replay_headers(reply)
        if reply.error == "too_large":
            return openai_error(
                400, reply.text, code="context_length_exceeded", param="input", headers=headers
            )
        if reply.error is not None:
            return openai_error(
                502, reply.text, code=reply.error, headers={"x-should-retry": "false"} | headers
            )
        used = await usage_of(agent, reply, call.text)
        out = shape.of(
            "incomplete" if reply.cut_short else "completed", reply.text, used, cut_short=reply.cut_short
        )
        return AsciiJSONResponse(out, headers=headers | used.headers())

    @app.get(
        "/v1/responses/{response_id}",
        tags=["openai"],
        dependencies=[Depends(require_token)],
        responses=openai_errors(404, 503),
    )
    async def get_response(response_id: str) -> Any:
        """A response kept with its conversation, read back from the store."""
        rid = ResponseId.read(response_id)
        if rid is None or rid.key is None:
            raise not_found(response_id)
        agent = agent_of(rid.agent)
        delivered = await agent.delivered(CHANNEL, rid.event_id)
        if delivered is None or delivered.conversation_key != rid.key or delivered.reply is None:
            raise not_found(response_id)
        shape = ResponseShape(rid, None, None)
        if delivered.status == "error" or delivered.run_id is None:
            error = {"code": "server_error", "message": delivered.error or "the turn failed"}
            return AsciiJSONResponse(shape.of("failed", error=error))
        reply = Reply(delivered.reply, rid.key, run_id=delivered.run_id)
        used = await usage_of(agent, reply, "")
        return AsciiJSONResponse(shape.of("completed", delivered.reply, used), headers=used.headers())


async def _events(
    stream: TurnStream, shape: ResponseShape, usage: Callable[[Reply], Awaitable[Usage]]
) -> AsyncIterator[str]:
    """The turn as the Responses event stream; the text ends as the reply, whatever was heard on the way
    (text before a tool call stays, followed by a blank line: an event cannot be taken back)."""
    number = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal number
        number += 1
        # ASCII JSON: no text the model wrote (a lone surrogate) can fail the stream half-way
        payload = json.dumps({"type": kind, "sequence_number": number - 1, **data})
        return f"event: {kind}\ndata: {payload}\n\n"

    where = {"item_id": shape.message_id, "output_index": 0, "content_index": 0}
    yield event("response.created", response=shape.of("in_progress"))
    yield event("response.in_progress", response=shape.of("in_progress"))
    yield event("response.output_item.added", output_index=0, item=shape.message("", "in_progress"))
    yield event("response.content_part.added", part=shape.part(""), **where)
    heard, showing = "", ""  # all the text sent; the text since the last restart
    async for item in stream.heard():
        if isinstance(item, str | Restart):
            piece = item if isinstance(item, str) else "\n\n"
            showing = showing + piece if isinstance(item, str) else ""
            heard += piece
            yield event("response.output_text.delta", delta=piece, logprobs=[], **where)
        elif isinstance(item, Failed) or (isinstance(item, Reply) and item.error is not None):
            message = item.reason if isinstance(item, Failed) else item.text
            code = (
                "invalid_prompt" if isinstance(item, Reply) and item.error == "too_large" else "server_error"
            )
            yield event(
                "response.failed", response=shape.of("failed", error={"code": code, "message": message})
            )
        elif isinstance(item, Reply):
            rest = item.text[len(showing) :] if item.text.startswith(showing) else "\n\n" + item.text
            if rest:
                heard += rest
                yield event("response.output_text.delta", delta=rest, logprobs=[], **where)
            status = "incomplete" if item.cut_short else "completed"
            yield event("response.output_text.done", text=heard, logprobs=[], **where)
            yield event("response.content_part.done", part=shape.part(heard), **where)
            yield event("response.output_item.done", output_index=0, item=shape.message(heard, status))
            done = shape.of(status, heard, await usage(item), cut_short=item.cut_short)
            yield event(f"response.{status}", response=done)
        else:
            yield ": ping\n\n"
