"""What a provider's error answer says: the reason it names (read with its status as the APIs document
them) and its human part, for the ProviderError that http.py raises."""

from __future__ import annotations

import json
from typing import Any

import httpx

from agentd.errors import (
    AUTH,
    CONTEXT_OVERFLOW,
    INVALID_REQUEST,
    NOT_FOUND,
    OTHER,
    OVERLOADED,
    RATE_LIMITED,
    SERVER_ERROR,
    TIMEOUT,
)

# How a prompt longer than the model's window is refused (HTTP 400): OpenAI's error code, and the
# words of OpenAI's and vLLM's ("This model's maximum context length is N tokens"), Anthropic's
# ("prompt is too long: 215000 tokens > 200000 maximum", and with max_tokens counted: "input length
# and `max_tokens` exceed context limit: 199759 + 8192 > 200000"), llama.cpp's server (type
# `exceed_context_size_error`, "request (N tokens) exceeds the available context size (M tokens)")
# and Ollama's ("the input length exceeds the context length") messages.
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_OVERFLOW_WORDS = (
    "prompt is too long",
    "maximum context length",
    "context_length_exceeded",
    "exceed context limit",
    "exceeds the available context size",
    "exceeds the context length",
)


def status_reason(status: int, body: Any) -> str:
    """What an error status says failed, read with its body as the APIs document them: OpenAI's
    `{"error": {"code": "context_length_exceeded", ...}}`, Anthropic's `{"type": "error", "error":
    {"type": "overloaded_error", ...}}` (which may come with another 5xx than 529)."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = code = message = ""
    if isinstance(error, dict):
        kind, code, message = (str(error.get(k) or "") for k in ("type", "code", "message"))
    elif isinstance(error, str):
        message = error
    if status in (400, 413) and (
        code in _OVERFLOW_CODES
        or kind in _OVERFLOW_CODES
        or any(w in message.lower() for w in _OVERFLOW_WORDS)
    ):
        return CONTEXT_OVERFLOW
    if status == 529 or kind == "overloaded_error":
        return OVERLOADED
    if status == 429:
        return RATE_LIMITED
    if status == 408:
        return TIMEOUT
    if status >= 500:
        return SERVER_ERROR
    if status in (401, 403):
        return AUTH
    if status == 404:
        return NOT_FOUND
    if status in (400, 413, 422):
        return INVALID_REQUEST
    return OTHER


_NOT_JSON = object()


def error_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON


def server_message(response: httpx.Response) -> str:
    """The human part of an error body: OpenAI's and Anthropic's `error.message`, else the text."""
    body = error_body(response)
    if body is _NOT_JSON:
        return snippet(response.text)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return snippet(error["message"])
        if isinstance(error, str):
            return snippet(error)
        if isinstance(body.get("message"), str):
            return snippet(body["message"])
    return snippet(json.dumps(body))


def snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
