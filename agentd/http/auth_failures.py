"""Failed token checks, counted rather than written one by one.

A refused request must cost the daemon nothing it cannot bound, and must never
wait on the store: the answer is a 401 at once, whatever the database is doing
(before, each refusal appended a chained audit event first, so 200 bad requests
made 200 events, and with the database down a stranger got a 503 naming its
host). So a refusal is only counted here, in memory, per source (the client's
address) and minute; the counts become one `auth denied` audit event per source
and minute when that minute is over (on the next refusal after it, and on the
daemon's periodic flush), when the trail is read (so `GET /audit` is never
behind), and at shutdown. A store that fails then is logged with the counts it
could not keep, and the counts are dropped: auditing can never change an answer.

Every bound is fixed: at most MAX_SOURCES sources a minute (the rest count as
`(others)`), at most MAX_DENIALS distinct (path, reason) pairs itemized per
event (the rest under `(other paths)`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)
MINUTE = 60.0
FLUSH_EVERY = 10.0  # seconds: how soon after its minute a count is written, at the latest
MAX_SOURCES = 100  # sources counted apart in one minute; the rest together
MAX_DENIALS = 20  # (path, reason) pairs itemized in one event; the rest by reason alone
OTHERS, OTHER_PATHS, UNKNOWN = "(others)", "(other paths)", "(unknown)"

Write = Callable[[dict[str, Any]], Awaitable[None]]
Key = tuple[float, str]  # (the minute's start, the source)


class AuthFailures:
    """Counts refusals (`note`, synchronous and store-free) and writes them coalesced (`flush`)."""

    def __init__(self, write: Write, clock: Callable[[], float] = time.time):
        self._write = write
        self.clock = clock
        self._counts: dict[Key, Counter[tuple[str, str]]] = {}
        self._oldest: float | None = None  # the earliest minute counted and not yet written
        self._flushing: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def note(self, path: str, reason: str, client: str | None) -> None:
        """One refused request; a minute gone by since the oldest count starts its flush."""
        minute = self._minute()
        key = (minute, client or UNKNOWN)
        if key not in self._counts and sum(m == minute for m, _ in self._counts) >= MAX_SOURCES:
            key = (minute, OTHERS)
        denials = self._counts.setdefault(key, Counter())
        pair = (path, reason)
        if pair not in denials and len(denials) >= MAX_DENIALS:
            pair = (OTHER_PATHS, reason)
        denials[pair] += 1
        if self._oldest is None:
            self._oldest = minute
        elif self._oldest < minute and (self._flushing is None or self._flushing.done()):
            # kept in self._flushing: the loop holds tasks weakly
            self._flushing = asyncio.get_running_loop().create_task(self.flush())

    def _minute(self) -> float:
        return self.clock() // MINUTE * MINUTE

    @property
    def pending(self) -> int:
        """Refusals counted and not yet written."""
        return sum(sum(c.values()) for c in self._counts.values())

    async def flush(self) -> None:
        """Write the minutes that are over (one event per source and minute)."""
        await self._flush(lambda minute: minute < self._minute())

    async def flush_all(self) -> None:
        """Write every count, the current minute's too (the trail is about to be read, or we stop)."""
        await self._flush(lambda minute: True)

    async def _flush(self, due: Callable[[float], bool]) -> int:
        async with self._lock:
            keys = sorted(k for k in self._counts if due(k[0]))
            taken = [(key, self._counts.pop(key)) for key in keys]
            self._oldest = min((m for m, _ in self._counts), default=None)
            written = 0
            for (minute, source), denials in taken:
                data = event_data(minute, source, denials)
                try:
                    await self._write(data)
                except Exception as e:  # a store failure is the operator's to see, never the caller's
                    log.warning(
                        "could not audit %d failed token checks from %s in the minute from %s: %s",
                        data["count"],
                        source,
                        time.strftime("%H:%M", time.gmtime(minute)),
                        e,
                    )
                else:
                    written += 1
            return written


def event_data(minute: float, source: str, denials: Counter[tuple[str, str]]) -> dict[str, Any]:
    """One `auth denied` event: who, which minute, how many, and which paths for which reasons."""
    return {
        "client": source,
        "minute": minute,
        "count": sum(denials.values()),
        "denials": [
            {"path": path, "reason": reason, "count": count}
            for (path, reason), count in sorted(denials.items(), key=lambda item: -item[1])
        ],
    }
