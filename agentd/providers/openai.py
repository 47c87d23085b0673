"""The OpenAI-compatible Chat Completions API: OpenAI itself, and Ollama, vLLM, llama.cpp, LM Studio ...

Kind `openai` needs a key (from the config or OPENAI_API_KEY); kind `ollama`
points at a local server and needs none.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from base64 import b64encode
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from agentd.errors import ProviderError
from agentd.messages import MediaPart, Message, Part, TextPart, ToolCallPart, ToolResultPart
from agentd.providers.base import Completion, CompletionRequest, TextDelta, Usage
from agentd.providers.http import (
    Endpoint,
    api_key,
    json_post,
    key_problem,
    post_form,
    post_json,
    post_sse,
    unreadable,
)
from agentd.providers.images import OPENAI as OPENAI_IMAGES
from agentd.providers.images import ShownImages, data_url
from agentd.providers.openai_stream import ChunkAssembly
from agentd.providers.streaming import stream_completion

_DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "ollama": "http://localhost:11434/v1"}
KEY_ENV = "OPENAI_API_KEY"


class OpenAIProvider:
    def __init__(
        self,
        *,
        name: str,
        kind: str,
        client: httpx.AsyncClient,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 16,
        retry_base_s: float = 0.5,
    ):
        if kind not in _DEFAULT_BASE_URLS:
            raise ValueError(f"OpenAIProvider serves kinds {sorted(_DEFAULT_BASE_URLS)}, not {kind!r}")
        self.name = name
        self.kind = kind
        self._client = client
        self._api_key = api_key
        self._endpoint = Endpoint(
            provider=name,
            base_url=(base_url or _DEFAULT_BASE_URLS[kind]).rstrip("/"),
            key_env=KEY_ENV if kind == "openai" else None,
            start_hint="is `ollama serve` running?" if kind == "ollama" else "is it running?",
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_base_s=retry_base_s,
        )
        self._slots = asyncio.BoundedSemaphore(max_concurrency)

    @property
    def base_url(self) -> str:
        return self._endpoint.base_url

    async def complete(self, request: CompletionRequest) -> Completion:
        headers = self._headers(request.model)
        payload = self._payload(request)
        # The slot is held across retries, so a rate-limited provider is not hit harder.
        async with self._slots:
            body = await post_json(
                self._client,
                self._endpoint,
                "/chat/completions",
                payload,
                model=request.model,
                headers=headers,
            )
        return self._completion(body, request.model)

    def stream(self, request: CompletionRequest) -> AsyncGenerator[TextDelta | Completion, None]:
        """The answer as it is written (`stream: true`), then the same Completion `complete` returns."""
        # include_usage: the last chunk carries the usage (OpenAI; Ollama since 0.5.2; vLLM; llama.cpp)
        payload = {**self._payload(request), "stream": True, "stream_options": {"include_usage": True}}
        post = json_post(
            self._client, self._endpoint, "/chat/completions", payload, self._headers(request.model)
        )
        events = post_sse(self._client, self._endpoint, post, model=request.model)
        read = functools.partial(self._completion, model=request.model)
        return stream_completion(
            events, ChunkAssembly(), self._slots, read, endpoint=self._endpoint, model=request.model
        )

    async def transcribe(self, model: str, data: bytes, filename: str, mime_type: str) -> str:
        """The text of an audio file (POST /audio/transcriptions: OpenAI, Groq, a local whisper server)."""
        async with self._slots:
            body = await post_form(
                self._client,
                self._endpoint,
                "/audio/transcriptions",
                {"model": model, "response_format": "json"},
                {"file": (filename, data, mime_type)},
                model=model,
                headers=self._headers(model),
            )
        text = body.get("text")
        if not isinstance(text, str):
            raise unreadable(self._endpoint, model, "no `text` in the transcription")
        return text.strip()

    def _headers(self, model: str) -> dict[str, str]:
        key = self._key(model)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def credential_problem(self, model: str) -> str | None:
        return None if self.kind == "ollama" else key_problem(self._endpoint, self._api_key, model)

    def _key(self, model: str) -> str | None:
        if self.kind == "ollama":
            # Never fall back to OPENAI_API_KEY here: that would hand the OpenAI key to another server.
            return self._api_key or None
        return api_key(self._endpoint, self._api_key, model)

    # -- to the wire ---------------------------------------------------------------

    def _payload(self, request: CompletionRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        shown = ShownImages(request.media, OPENAI_IMAGES, provider=self.name, model=request.model)
        for message in request.messages:
            messages.extend(self._wire_messages(message, request.model, shown))
        payload: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            payload["max_tokens"] = request.max_output_tokens
        if request.stop:
            payload["stop"] = list(request.stop)
        return payload

    def _wire_messages(self, message: Message, model: str, shown: ShownImages) -> list[dict[str, Any]]:
        """One of our messages as Chat Completions messages (a tool message becomes one per result)."""
        texts: list[str] = []
        user_parts: list[dict[str, Any]] = []  # a user message's parts, when it shows an image
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for part in message.parts:
            match part:
                case TextPart(text=text) if message.role != "tool":
                    texts.append(text)
                    user_parts.append({"type": "text", "text": text})
                case MediaPart() if message.role == "user":
                    if (image := shown.image(part)) is not None:
                        user_parts.append({"type": "image_url", "image_url": {"url": data_url(*image)}})
                    else:
                        texts.append(shown.text(part))
                        user_parts.append({"type": "text", "text": texts[-1]})
                case ToolCallPart(id=call_id, name=name, arguments=arguments) if message.role == "assistant":
                    calls.append(
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                    )
                case ToolResultPart(call_id=call_id, content=content, is_error=is_error) if (
                    message.role == "tool"
                ):
                    # The wire has no error flag for tool results; say it in the content.
                    text = f"error: {content}" if is_error else content
                    said, shown_parts = _result_files(part, shown)
                    results.append({"role": "tool", "tool_call_id": call_id, "content": text + said})
                    if shown_parts:
                        user_parts.append(
                            {"type": "text", "text": f"The files {part.name} returned ({call_id}):"}
                        )
                        user_parts.extend(shown_parts)
                case _:
                    raise self._cannot_carry(part, message, model)
        if message.role == "tool":
            # a tool message carries text only: the results' images and audio follow in one user message
            return results + ([{"role": "user", "content": user_parts}] if user_parts else [])
        if message.role == "user":
            if any(c["type"] == "image_url" for c in user_parts):
                return [{"role": "user", "content": user_parts}]
            return [{"role": "user", "content": "\n".join(texts) if message.media else "".join(texts)}]
        wire: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts or not calls else None,
        }
        if calls:
            wire["tool_calls"] = calls
        return [wire]

    def _cannot_carry(self, part: Part, message: Message, model: str) -> ProviderError:
        return ProviderError(
            f"cannot send a {part.kind} part in a {message.role} message over the Chat Completions API",
            provider=self.name,
            model=model,
        )

    # -- from the wire -------------------------------------------------------------

    def _completion(self, body: dict[str, Any], model: str) -> Completion:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise unreadable(self._endpoint, model, "no `choices` in the reply")
        choice = choices[0]
        wire = choice.get("message")
        if not isinstance(wire, dict):
            raise unreadable(self._endpoint, model, "`choices[0].message` is missing")
        content = wire.get("content")
        if content is not None and not isinstance(content, str):
            raise unreadable(self._endpoint, model, "`message.content` is not a string")
        parts: list[Part] = []
        if content:
            parts.append(TextPart(text=content))
        raw_calls = wire.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise unreadable(self._endpoint, model, "`message.tool_calls` is not a list")
        parts.extend(self._tool_call(raw, model) for raw in raw_calls)
        finish = choice.get("finish_reason")
        return Completion(
            message=Message(role="assistant", parts=tuple(parts)),
            usage=_usage(body.get("usage")),
            stop_reason=finish if isinstance(finish, str) else None,
            raw=body,
        )

    def _tool_call(self, raw: Any, model: str) -> ToolCallPart:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise unreadable(self._endpoint, model, f"a tool call without a function name: {raw!r}")
        arguments = function.get("arguments")
        # Some OpenAI-compatible servers send the arguments as an object, not a JSON string.
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise ProviderError(
                    f"malformed tool call arguments for {function['name']!r} ({exc}): {arguments[:200]!r}",
                    provider=self.name,
                    model=model,
                ) from None
        elif arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ProviderError(
                f"malformed tool call arguments for {function['name']!r}: expected a JSON object",
                provider=self.name,
                model=model,
            )
        # A few local servers omit the id; the model only needs it to match the result we send back.
        call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:16]}"
        return ToolCallPart(id=str(call_id), name=function["name"], arguments=arguments)


def _result_files(result: ToolResultPart, shown: ShownImages) -> tuple[str, list[dict[str, Any]]]:
    """What the tool message says of the result's files, and the parts of those sent as they are."""
    said, parts = "", []
    for part in result.media:
        if (image := shown.image(part)) is not None:
            parts.append({"type": "image_url", "image_url": {"url": data_url(*image)}})
            said += f"\n{part.stand_in()} (shown in the next message)"
        elif (audio := shown.audio(part)) is not None:
            data, fmt = audio
            parts.append(
                {"type": "input_audio", "input_audio": {"data": b64encode(data).decode(), "format": fmt}}
            )
            said += f"\n{part.stand_in()} (sent in the next message)"
        else:
            said += f"\n{shown.text(part)}"
    return said, parts


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(input_tokens=prompt, output_tokens=completion)
