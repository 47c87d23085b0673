"""Telegram albums as one message: a person who sends three photos at once sends three updates with the
same `media_group_id` (the caption on one of them), and expects one answer about all three, not three
answers of which two saw a photo without its question.

The parts of an album arrive within a moment of each other; each one held moves the album's deadline
`settle` seconds on, and at the deadline the parts go on as one route: the captioned part's text and
address, and every part's files in the order they were sent. Whether the album is for the bot at all
(in a group that answers mentions only) is decided by its parts together: one addressed part (the
caption naming the bot) takes the whole album.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from telegram import Message

from agentd.channels.chat import Route
from agentd.clock import SYSTEM_CLOCK, Clock

ALBUM_SETTLE = 1.0  # seconds after an album's last part before it is answered


@dataclass
class _Album:
    parts: list[tuple[int, Route[Any]]] = field(default_factory=list)  # (message id, its route), any part
    addressed: list[Route[Any]] = field(default_factory=list)  # the parts that are for the bot by themselves
    deadline: float = 0.0


class Albums:
    """Holds album parts until their album is complete, then has the whole album handled."""

    def __init__(
        self,
        handle: Callable[[Route[Any]], Awaitable[None]],
        track: Callable[[Coroutine[Any, Any, None]], object],
        stopping: asyncio.Event,
        settle: float = ALBUM_SETTLE,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._handle = handle  # answers a whole album, in the album's own task
        self._track = track  # runs that task where the channel's stop drains it
        self._stopping = stopping  # set: complete every album now, within the drain
        self.settle = settle
        self.clock = clock
        self._open: dict[str, _Album] = {}

    def hold(
        self, message: Message | None, route: Route[Any] | None, part: Callable[[], Route[Any] | None]
    ) -> Route[Any] | None:
        """The route to answer now: `route` itself (None: not for the bot), or None when the message is
        part of an album, answered later. `part()` is the message's route were it addressed to the bot."""
        group = message.media_group_id if message is not None else None
        if group is None or message is None:
            return route
        as_part = route or part()
        if as_part is None:
            return None  # not a message the bot could answer (no file, say): no part of any album
        album = self._open.get(group)
        if album is None:
            album = self._open[group] = _Album()
            self._track(self._complete(group, album))
        album.parts.append((message.message_id, as_part))
        if route is not None:
            album.addressed.append(route)
        album.deadline = self.clock.time() + self.settle
        return None

    async def _complete(self, group: str, album: _Album) -> None:
        # a part that came meanwhile moved the deadline on; stopping ends the wait at once
        while self.clock.time() < album.deadline and not self._stopping.is_set():
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(self.clock.sleep_until(album.deadline))}
            waits.add(asyncio.ensure_future(self._stopping.wait()))
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for wait in pending:
                wait.cancel()
        del self._open[group]
        if album.addressed:  # else no part named the bot: the album was not for it
            parts = [route for _, route in sorted(album.parts, key=lambda part: part[0])]
            await self._handle(merged(album.addressed, parts))

    @property
    def held(self) -> int:
        """Parts held in albums still collecting them."""
        return sum(len(album.parts) for album in self._open.values())


def merged(addressed: list[Route[Any]], parts: list[Route[Any]]) -> Route[Any]:
    """One route of an album's parts (in the order sent): the captioned part of those addressed to the
    bot leads (its text, its event id), and every part's files follow."""
    lead = next((route for route in addressed if route.text), addressed[0])
    files = tuple(attachment for part in parts for attachment in part.attachments)
    return dataclasses.replace(lead, attachments=files)
