"""Anthropic's native Messages API (POST /v1/messages).

The wire differs from ours in three ways this module bridges: the system
prompt is a top-level field, tool results travel as `tool_result` blocks in a
user message, and user and assistant turns must alternate, so consecutive
messages that land on the same wire role are merged into one turn.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx

from agentd.errors import ProviderError
from agentd.messages import MediaPart, Message, Part, TextPart, ToolCallPart, ToolResultPart
from agentd.providers.anthropic_stream import EventAssembly
from agentd.providers.base import Completion, CompletionRequest, TextDelta, Usage
from agentd.providers.http import Endpoint, api_key, json_post, key_problem, post_json, post_sse, unreadable
from agentd.providers.images import ANTHROPIC as ANTHROPIC_IMAGES
from agentd.providers.images import ShownImages
from agentd.providers.streaming import stream_completion

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
KEY_ENV = "ANTHROPIC_API_KEY"
# The API requires max_tokens; this is used when the agent file does not set one.
DEFAULT_MAX_TOKENS = 1024


class AnthropicProvider:
    def __init__(
        self,
        *,
        name: str,
        client: httpx.AsyncClient,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 16,
        retry_base_s: float = 0.5,
    ):
        self.name = name
        self.kind = "anthropic"
        self._client = client
        self._api_key = api_key
        self._endpoint = Endpoint(
            provider=name,
            base_url=(base_url or DEFAULT_BASE_URL).rstrip("/"),
            key_env=KEY_ENV,
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_base_s=retry_base_s,
        )
        self._slots = asyncio.BoundedSemaphore(max_concurrency)

    @property
    def base_url(self) -> str:
        return self._endpoint.base_url

    def credential_problem(self, model: str) -> str | None:
        return key_problem(self._endpoint, self._api_key, model)

    async def complete(self, request: CompletionRequest) -> Completion:
        headers = self._headers(request.model)
        payload = self._payload(request)
        # The slot is held across retries, so a rate-limited provider is not hit harder.
        async with self._slots:
            body = await post_json(
                self._client, self._endpoint, "/v1/messages", payload, model=request.model, headers=headers
            )
        return self._completion(body, request.model)

    def stream(self, request: CompletionRequest) -> AsyncGenerator[TextDelta | Completion, None]:
        """The answer as it is written (`stream: true`), then the same Completion `complete` returns."""
        payload = {**self._payload(request), "stream": True}
        post = json_post(self._client, self._endpoint, "/v1/messages", payload, self._headers(request.model))
        events = post_sse(self._client, self._endpoint, post, model=request.model)
        read = functools.partial(self._completion, model=request.model)
        return stream_completion(
            events, EventAssembly(), self._slots, read, endpoint=self._endpoint, model=request.model
        )

    def _headers(self, model: str) -> dict[str, str]:
        return {"x-api-key": api_key(self._endpoint, self._api_key, model), "anthropic-version": API_VERSION}

    # -- to the wire ---------------------------------------------------------------

    def _payload(self, request: CompletionRequest) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": self._turns(
                request.messages,
                request.model,
                ShownImages(request.media, ANTHROPIC_IMAGES, provider=self.name, model=request.model),
            ),
        }
        if request.system:
            payload["system"] = request.system
        if request.tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.stop:
            payload["stop_sequences"] = list(request.stop)
        return payload

    def _turns(self, messages: Sequence[Message], model: str, shown: ShownImages) -> list[dict[str, Any]]:
        turns: list[dict[str, Any]] = []
        for message in messages:
            role = "assistant" if message.role == "assistant" else "user"
            blocks = [self._block(part, message, model, shown) for part in message.parts]
            # The API refuses empty text blocks; an empty message carries nothing to send.
            blocks = [b for b in blocks if not (b["type"] == "text" and not b["text"])]
            if not blocks:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        for turn in turns:
            # In a user turn the API wants tool results before any text (the sort is stable).
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
        return turns

    def _block(self, part: Part, message: Message, model: str, shown: ShownImages) -> dict[str, Any]:
        match part:
            case TextPart(text=text) if message.role != "tool":
                return {"type": "text", "text": text}
            case MediaPart() if message.role == "user":
                return _media_block(part, shown)
            case ToolCallPart(id=call_id, name=name, arguments=arguments) if message.role == "assistant":
                return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
            case ToolResultPart(call_id=call_id, content=content, is_error=is_error) if (
                message.role == "tool"
            ):
                # a result's images go inside it, as image blocks; its other files by their stand-in
                blocks = [{"type": "text", "text": content}] if content else []
                blocks += [_media_block(m, shown) for m in part.media]
                return {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": blocks if part.media else content,
                    "is_error": is_error,
                }
            case _:
                raise ProviderError(
                    f"cannot send a {part.kind} part in a {message.role} message over the Messages API",
                    provider=self.name,
                    model=model,
                )

    # -- from the wire -------------------------------------------------------------

    def _completion(self, body: dict[str, Any], model: str) -> Completion:
        content = body.get("content")
        if not isinstance(content, list):
            raise unreadable(self._endpoint, model, "no `content` list in the reply")
        parts: list[Part] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                if block["text"]:
                    parts.append(TextPart(text=block["text"]))
            elif (
                kind == "tool_use"
                and isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
                and isinstance(block.get("input"), dict)
            ):
                parts.append(ToolCallPart(id=block["id"], name=block["name"], arguments=block["input"]))
            else:
                raise unreadable(
                    self._endpoint, model, f"a content block agentd does not know: {block!r:.200}"
                )
        stop = body.get("stop_reason")
        return Completion(
            message=Message(role="assistant", parts=tuple(parts)),
            usage=_usage(body.get("usage")),
            stop_reason=stop if isinstance(stop, str) else None,
            raw=body,
        )


def _media_block(part: MediaPart, shown: ShownImages) -> dict[str, Any]:
    """An image block for a file shown as an image, else a text block with its stand-in."""
    if (image := shown.image(part)) is None:
        return {"type": "text", "text": shown.text(part)}
    data, mime_type = image
    source = {"type": "base64", "media_type": mime_type, "data": base64.b64encode(data).decode()}
    return {"type": "image", "source": source}


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    inputs, outputs = raw.get("input_tokens"), raw.get("output_tokens")
    if not isinstance(inputs, int) or not isinstance(outputs, int):
        return None
    # With prompt caching, input_tokens counts only the uncached part; the context
    # the model read is the sum, and that is what compaction must compare.
    for cached in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        if isinstance(raw.get(cached), int):
            inputs += raw[cached]
    return Usage(input_tokens=inputs, output_tokens=outputs)
