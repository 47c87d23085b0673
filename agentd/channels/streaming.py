"""A reply shown while the model writes it: platform messages posted once and edited as the text grows.

A channel with `stream: true` hands one of these to the host as the turn's
ReplySink. At the first text it posts a message; then, at most once every
`every` seconds, it edits the messages to the text so far, split exactly as a
reply is split (a code block cut at the limit is closed, and reopened in the
next message), posting another message when the text outgrows one. A rate
limit pauses the edits for as long as the platform asks; a failed edit is
simply tried again with the next round. After a restart (the model went on to
call a tool) the messages keep their text until new text replaces it.

When the turn is over, `settle` makes the messages exactly the reply as it
would have been sent unstreamed: each one edited to its final piece (with the
channel's retries), further pieces posted, messages left over deleted. The
person ends up seeing the same messages either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from agentd.channels.splitting import split_message

log = logging.getLogger(__name__)

TargetT = TypeVar("TargetT")
TargetC = TypeVar("TargetC", contravariant=True)
T = TypeVar("T")


class Platform(Protocol[TargetC]):
    """What a streamed reply needs of its channel (ChatChannel has all of it)."""

    name: str
    message_limit: int

    async def send_chunk(self, target: TargetC, text: str, part: int) -> Any: ...

    async def edit_chunk(self, target: TargetC, sent: Any, text: str) -> None: ...

    async def delete_chunk(self, target: TargetC, sent: Any) -> None: ...

    def rate_limit_wait(self, exc: Exception) -> float | None: ...

    def describe_error(self, exc: BaseException) -> str: ...

    async def retrying(self, call: Callable[[], Awaitable[T]]) -> T: ...


class PartFailed(Exception):
    """A piece of the final reply could not be shown, even with retries; the cause says why."""

    def __init__(self, part: int, parts: int):
        super().__init__(f"part {part} of {parts}")
        self.part, self.parts = part, parts


@dataclass
class _Shown:
    handle: Any  # what the platform answered the post with (a message, a ts)
    text: str


class StreamedReply(Generic[TargetT]):
    def __init__(self, platform: Platform[TargetT], target: TargetT, every: float):
        self._platform = platform
        self._target = target
        self._every = every
        self._text = ""  # the text of the current model call, so far
        self._progress = ""  # how far a tool call is, shown until the model writes again
        self._shown: list[_Shown] = []  # the messages posted, in order
        self._changed = asyncio.Event()  # new text, or the turn is over
        self._stopping = asyncio.Event()
        self._hold_until = 0.0  # time.monotonic() before which the platform asked for no edits
        self._task: asyncio.Task[None] | None = None

    # -- the ReplySink ------------------------------------------------------------------------

    def delta(self, text: str) -> None:
        self._text += text
        self._progress = ""
        self._changed.set()
        if self._task is None and not self._stopping.is_set():
            self._task = asyncio.create_task(self._keep_showing())

    def restart(self) -> None:
        self._text = ""  # what shows stays until the next call's text replaces it

    def progress(self, text: str) -> None:
        """A tool call's progress (an MCP server's), shown while no reply text is (settle replaces it)."""
        self._progress = f"({text})"
        self._changed.set()
        if self._task is None and not self._stopping.is_set():
            self._task = asyncio.create_task(self._keep_showing())

    # -- while the turn runs --------------------------------------------------------------------

    async def _keep_showing(self) -> None:
        while True:
            await self._changed.wait()
            if self._stopping.is_set():
                return
            self._changed.clear()
            hold = self._hold_until - time.monotonic()
            if hold > 0 and await self._sleep(hold):
                return
            showing = self._text if self._text.strip() else self._progress
            if showing.strip():
                try:
                    await self._show(self._pieces(showing), final=False)
                except Exception as exc:  # the next round (or settle) tries again
                    wait = self._platform.rate_limit_wait(exc)
                    if wait is not None:
                        self._hold_until = time.monotonic() + wait
                    log.debug("%s: an edit of a streamed reply failed: %s", self._platform.name, exc)
            if await self._sleep(self._every):
                return

    async def _sleep(self, seconds: float) -> bool:
        """Wait, or less when the turn ends; True when it ended."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def stop(self) -> None:
        """No more edits as the text grows (one under way finishes first)."""
        self._stopping.set()
        self._changed.set()
        if self._task is not None:
            await self._task

    # -- when it is over ----------------------------------------------------------------------------

    @property
    def posted(self) -> int:
        return len(self._shown)

    async def settle(self, reply: str) -> None:
        """Make the messages exactly `reply`, split as an unstreamed reply is (none when it is blank).
        Raises PartFailed at the first piece that cannot be shown."""
        await self.stop()
        hold = self._hold_until - time.monotonic()
        if hold > 0:  # the platform asked for a pause: the final edit waits it out, not into a new 429
            await asyncio.sleep(hold)
        pieces = self._pieces(reply) if reply.strip() else []
        await self._show(pieces, final=True)
        for left in self._shown[len(pieces) :]:
            with contextlib.suppress(Exception):  # a leftover that will not go is not worth failing over
                await self._platform.retrying(
                    functools.partial(self._platform.delete_chunk, self._target, left.handle)
                )
        del self._shown[len(pieces) :]

    def _pieces(self, text: str) -> list[str]:
        return split_message(text, self._platform.message_limit)

    async def _show(self, pieces: list[str], *, final: bool) -> None:
        platform, target = self._platform, self._target
        for index, piece in enumerate(pieces):
            if index < len(self._shown) and self._shown[index].text == piece:
                continue
            if index < len(self._shown):
                call: Callable[[], Awaitable[Any]] = functools.partial(
                    platform.edit_chunk, target, self._shown[index].handle, piece
                )
            else:
                call = functools.partial(platform.send_chunk, target, piece, index + 1)
            try:
                answer = await (platform.retrying(call) if final else call())
            except Exception as exc:
                if final:
                    raise PartFailed(index + 1, len(pieces)) from exc
                raise
            if index < len(self._shown):
                self._shown[index].text = piece
            else:
                self._shown.append(_Shown(answer, piece))
