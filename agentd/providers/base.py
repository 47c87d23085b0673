"""The model seam: one main method, `complete(request) -> Completion`; streaming is a separate
optional capability (`StreamingProvider`), checked by type."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
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
class PromptHints:
    """What the runtime put into the system prompt, as data.

    Remote models read the prompt; the built-in offline model reads these
    instead, so it never depends on the wording of a memory module's headings.
    """

    summary: bool = False  # a summary of older turns is in the prompt
    recalled: int = 0  # earlier exchanges recalled into the prompt
    memory_keys: tuple[str, ...] | None = None  # persistent-memory keys listed; None: no persistent memory

    def merged(self, other: PromptHints) -> PromptHints:
        return PromptHints(
            self.summary or other.summary,
            self.recalled + other.recalled,
            other.memory_keys if other.memory_keys is not None else self.memory_keys,
        )


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
    stop: tuple[str, ...] = ()  # the text ends before the first of these (a caller's `stop`)
    purpose: str = "chat"
    hints: PromptHints = PromptHints()
    # the bytes of the images this request shows the model, by sha256: a MediaPart whose bytes are
    # here is sent as an image (once per request), any other by its stand-in text (agentd.engine.media)
    media: Mapping[str, bytes] = field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant's text, as the model writes it."""

    text: str


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider that can also hand out its answer as it is written.

    `stream` yields TextDeltas and ends with the full Completion (the same one
    `complete` would return: text, tool calls, usage). Transient failures are
    retried only until the provider starts answering; a stream that breaks
    after that raises ProviderError, so nothing half-written passes for an answer.
    """

    name: str

    def stream(self, request: CompletionRequest) -> AsyncGenerator[TextDelta | Completion, None]: ...


class Embedder(Protocol):
    """Turns texts into vectors; `id` names the model so vectors of different models never mix."""

    id: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...
