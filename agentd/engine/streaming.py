"""A model call that a reply sink hears as it is written.

With no sink, or a provider that cannot stream, the call is the plain
`complete` (the non-streaming path costs one `is None` check). The sink is the
consumer's (a channel, an HTTP client): one that raises is dropped for the rest
of the turn and logged once, so a broken consumer never fails a turn.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from agentd.errors import ProviderError
from agentd.events import ReplySink
from agentd.providers.base import Completion, CompletionRequest, ModelProvider, StreamingProvider, TextDelta

log = logging.getLogger(__name__)


class StepSink:
    """The turn's hold on a ReplySink: knows whether text of the current model call is showing."""

    def __init__(self, sink: ReplySink, where: str):
        self._sink: ReplySink | None = sink
        self._where = where
        self.showing = False
        self.shown = ""  # the text of the current model call that reached the person

    def delta(self, text: str) -> None:
        self.showing = True
        self.shown += text
        if self._sink is not None:
            self._call(self._sink.delta, text)

    def progress(self, text: str) -> None:
        """How far a tool call is (an MCP server's progress), for a sink that can show it: one with a
        `progress(text)` method (the HTTP event stream); the others hear nothing of it."""
        shown = getattr(self._sink, "progress", None)
        if shown is not None:
            self._call(shown, text)

    def restart(self) -> None:
        """What is showing is not the reply (the model called tools, or the call failed)."""
        self.shown = ""
        if self.showing:
            self.showing = False
            if self._sink is not None:
                self._call(self._sink.restart)

    def _call(self, method: Callable[..., None], *args: str) -> None:
        try:
            method(*args)
        except Exception:
            log.exception("%s: the reply sink failed; the rest of the reply goes out at once", self._where)
            self._sink = None


async def call_model(
    provider: ModelProvider, request: CompletionRequest, sink: StepSink | None
) -> Completion:
    if sink is None or not isinstance(provider, StreamingProvider):
        return await provider.complete(request)
    completion: Completion | None = None
    async with contextlib.aclosing(provider.stream(request)) as stream:
        async for item in stream:
            if isinstance(item, TextDelta):
                sink.delta(item.text)
            else:
                completion = item
    if completion is None:
        raise ProviderError("the stream ended without an answer", provider=provider.name, model=request.model)
    return completion
