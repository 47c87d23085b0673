"""What every streamed answer shares: reading a provider's event stream into text and a whole answer.

An API's `Assembly` takes the stream's events one by one, says what text each
adds, and at the end gives the body a non-streamed call would have returned,
which the provider then reads exactly as it reads that call's reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from agentd.errors import STREAM_BROKEN, ProviderError
from agentd.providers.base import Completion, TextDelta
from agentd.providers.http import Endpoint, unreadable
from agentd.providers.sse import ServerSentEvent


class StreamProblem(Exception):
    """An event that is not what the API promises, or an error the server sent mid-answer; `reason`
    says what failed as ProviderError.reason does."""

    def __init__(self, message: str, reason: str = STREAM_BROKEN):
        self.reason = reason
        super().__init__(message)


class Assembly(Protocol):
    done: bool  # the server said the stream is over: stop reading
    complete: bool  # the whole answer arrived

    def feed(self, event: ServerSentEvent) -> str:
        """Take one event; the text it adds ("" when none). Raises StreamProblem or JSONDecodeError."""
        ...

    def body(self) -> dict[str, Any]:
        """The answer as the API's non-streamed reply body."""
        ...


async def stream_completion(
    events: AsyncGenerator[ServerSentEvent, None],
    assembly: Assembly,
    slots: asyncio.BoundedSemaphore,
    read: Callable[[dict[str, Any]], Completion],
    *,
    endpoint: Endpoint,
    model: str,
) -> AsyncGenerator[TextDelta | Completion, None]:
    """A provider's stream: the text of `events` as it comes, then `read` of the whole answer (the
    provider's reading of a non-streamed reply). Holds one of the provider's `slots` while it reads.
    A stream that ends before the answer is whole is a ProviderError."""
    async with slots, contextlib.aclosing(events):
        async for event in events:
            try:
                text = assembly.feed(event)
            except json.JSONDecodeError:
                detail = f"a {event.event} event whose data is not JSON: {event.data[:200]!r}"
                raise unreadable(endpoint, model, detail) from None
            except StreamProblem as problem:
                raise ProviderError(
                    str(problem), provider=endpoint.provider, model=model, reason=problem.reason
                ) from None
            if text:
                yield TextDelta(text)
            if assembly.done:
                break
    if not assembly.complete:
        raise ProviderError(
            "the stream ended before the answer was complete",
            provider=endpoint.provider,
            model=model,
            reason=STREAM_BROKEN,
        )
    yield read(assembly.body())
