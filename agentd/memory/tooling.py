"""Tools the model can call: a spec the provider sends, and the handler that answers a call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentd.providers.base import ToolSpec


@dataclass(frozen=True, slots=True)
class ToolCall:
    """Who is calling: the conversation, run and person a tool call belongs to."""

    conversation_key: str
    run_id: str
    user_id: str | None
    sent_at: float | None = None  # when the message being answered was sent, if the channel said


Handler = Callable[[dict[str, Any], ToolCall], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    handler: Handler


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }
