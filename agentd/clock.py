"""The wall clock, as something a test can hold: scheduled fires, run deadlines, budget days and rate
buckets read the time and wait through a `Clock`, so tests move time forward instead of sleeping.

`SystemClock` is the real one; `testkit.clock.ManualClock` is the one tests advance.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    def time(self) -> float:
        """Now, in epoch seconds (UTC)."""
        ...

    async def sleep_until(self, when: float) -> None:
        """Return once `time()` has reached `when` (at once if it has); cancellable like any wait."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    async def sleep_until(self, when: float) -> None:
        # the wall clock can jump (NTP, a laptop waking): wait in steps of at most a minute and look
        # again, so a fire is never late by more than a step after a jump forward
        while (left := when - time.time()) > 0:  # noqa: ASYNC110 - it is time, not an event, awaited
            await anyio.sleep(min(left, 60.0))


SYSTEM_CLOCK = SystemClock()
