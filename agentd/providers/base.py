"""The model seam: one main method, `complete(request) -> Completion`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentd.messages import Message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: name, description and a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """Everything a provider needs for one call.

    `purpose` says why the runtime is asking ("chat", "summary", ...). Remote
    providers ignore it; the built-in offline model uses it to decide what
    honest deterministic answer to give.
    """

    model: str
    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    temperature: float | None = None
    max_output_tokens: int | None = None
    purpose: str = "chat"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's answer: one assistant message, and usage when the provider reported it."""

    message: Message
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@runtime_checkable
class ModelProvider(Protocol):
    """A configured provider endpoint; `complete` raises ProviderError when it fails for good."""

    name: str

    async def complete(self, request: CompletionRequest) -> Completion: ...


class Embedder(Protocol):
    """Turns texts into vectors; `id` names the model so vectors of different models never mix."""

    id: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
