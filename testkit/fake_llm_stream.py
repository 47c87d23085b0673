"""The fake model server's streamed answers: a finished reply body re-cut into the API's own events.

OpenAI (`stream: true` on /v1/chat/completions): a role chunk, a chunk per text
piece, each tool call as a first chunk (id, name, half the arguments) and a
second (the rest), a finish chunk, a usage chunk when `stream_options.include_usage`
asks, then `data: [DONE]`. Anthropic (`stream: true` on /v1/messages):
message_start (input usage), per content block its start, deltas (text pieces;
tool input JSON in two halves) and stop, a ping, message_delta (stop reason,
output usage), message_stop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any


def split_text(text: str, pieces: Sequence[str] | None) -> list[str]:
    """The text as streamed: the scripted pieces (which must add up to it), else word by word."""
    if pieces is not None:
        if "".join(pieces) != text:
            raise ValueError(f"the pieces {list(pieces)!r} do not add up to the reply {text!r}")
        return list(pieces)
    return [w for w in re.findall(r"\S*\s*", text) if w]


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def openai_events(body: dict[str, Any], pieces: Sequence[str] | None, include_usage: bool) -> list[bytes]:
    """A non-streamed Chat Completions body as the chunks of its stream."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in split_text(message.get("content") or "", pieces)]
    for i, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        first = {"index": i, "id": call["id"], "type": "function"}
        first["function"] = {"name": call["function"]["name"], "arguments": arguments[:half]}
        events.append(chunk({"tool_calls": [first]}))
        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments[half:]}}]}))
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage and "usage" in body:
        events.append(sse({**base, "choices": [], "usage": body["usage"]}))
    events.append(b"data: [DONE]\n\n")
    return events


def anthropic_events(body: dict[str, Any], pieces: Sequence[str] | None) -> list[bytes]:
    """A non-streamed Messages API body as the events of its stream."""
    usage = body.get("usage") or {}
    start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "usage")}
    start |= {"content": [], "stop_reason": None, "usage": {"input_tokens": usage.get("input_tokens", 0)}}
    events = [sse({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in split_text(block["text"], pieces)]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            half = len(raw) // 2
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in (raw[:half], raw[half:])]
        events.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": opening},
                "content_block_start",
            )
        )
        events += [
            sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        ]
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    events.append(sse({"type": "ping"}, "ping"))
    delta = {"type": "message_delta", "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None}}
    if usage:
        delta["usage"] = {"output_tokens": usage.get("output_tokens", 0)}
    events.append(sse(delta, "message_delta"))
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return events
