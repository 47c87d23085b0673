"""A turn streamed to an HTTP client: run in a task of its own, heard through a queue.

The turn never belongs to the request: a client that disconnects mid-stream
stops hearing it, and the turn goes on, commits and is in the transcript and
the runs as if nothing had happened (it is still counted as in flight, so a
drain waits for it). What the client hears is what the sink heard: text
pieces, restarts, and at the end the Reply (or why the turn could not run).
While the model is silent a keep-alive goes out every `PING_SECONDS`, so
proxies do not close an idle connection.

`POST /agents/{agent}/messages?stream=true` (and `/repl`) speak it as
Server-Sent Events: `delta` {"text"}, `restart` {}, `progress` {"text"} (how
far a tool call is, as its MCP server says), then `reply` {reply, run_id,
conversation_key, error} or `error` {"error"}.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse

from agentd.errors import StoreError
from agentd.events import Reply, ReplySink
from agentd.http.errors import ApiError, store_unavailable

log = logging.getLogger(__name__)
PING_SECONDS = 15.0
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # nginx: do not buffer it


@dataclass(frozen=True, slots=True)
class Restart:
    """The text heard since the last restart is not the reply."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn could not run to a reply (the agent's data unavailable, the request refused, a bug);
    `reason` says why."""

    reason: str


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a tool call is, in words (not part of the reply)."""

    text: str


@dataclass(frozen=True, slots=True)
class Ping:
    """Nothing new for a while."""


Heard = str | Restart | Progress | Reply | Failed | Ping
RESTART, PING = Restart(), Ping()


class _QueueSink:
    def __init__(self, queue: asyncio.Queue[Heard]):
        self._queue = queue

    def delta(self, text: str) -> None:
        self._queue.put_nowait(text)

    def restart(self) -> None:
        self._queue.put_nowait(RESTART)

    def progress(self, text: str) -> None:
        self._queue.put_nowait(Progress(text))


class TurnStream:
    """Starts `run(sink)` at once; `heard()` yields what it says until its Reply (or Failed)."""

    def __init__(self, run: Callable[[ReplySink], Awaitable[Reply]], keep: set[asyncio.Task[None]]):
        self._queue: asyncio.Queue[Heard] = asyncio.Queue()
        task = asyncio.create_task(self._run(run))
        keep.add(task)  # the loop holds tasks weakly: this keeps a turn whose client left alive
        task.add_done_callback(keep.discard)

    async def _run(self, run: Callable[[ReplySink], Awaitable[Reply]]) -> None:
        try:
            reply = await run(_QueueSink(self._queue))
        except StoreError as exc:
            log.error("a streamed turn could not run: %s", exc)
            self._queue.put_nowait(Failed(store_unavailable(exc)))
        except ApiError as exc:  # refused for what the request said (a key naming another conversation)
            log.info("a streamed turn was refused: %s", exc.reason)
            self._queue.put_nowait(Failed(exc.reason))
        except Exception:
            log.exception("a streamed turn failed")
            self._queue.put_nowait(Failed("the turn failed inside agentd; the daemon's log says why"))
        else:
            self._queue.put_nowait(reply)

    async def heard(self, ping_every: float = PING_SECONDS) -> AsyncIterator[Heard]:
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), ping_every)
            except TimeoutError:
                yield PING
                continue
            yield item
            if isinstance(item, Reply | Failed):
                return


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def reply_events(stream: TurnStream, out: Callable[[Reply], dict[str, Any]]) -> StreamingResponse:
    """agentd's own event stream of a turn (see the module docstring)."""

    async def events() -> AsyncIterator[str]:
        async for item in stream.heard():
            if isinstance(item, str):
                yield sse("delta", {"text": item})
            elif isinstance(item, Restart):
                yield sse("restart", {})
            elif isinstance(item, Progress):
                yield sse("progress", {"text": item.text})
            elif isinstance(item, Reply):
                yield sse("reply", out(item))
            elif isinstance(item, Failed):
                yield sse("error", {"error": item.reason})
            else:
                yield ": ping\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)
