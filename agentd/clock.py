"""The wall clock, as something a test can hold: scheduled fires, run deadlines, budget days and rate
buckets read the time and wait through a `Clock`, so tests move time forward instead of sleeping.

`SystemClock` is the real one; `testkit.clock.ManualClock` is the one tests advance.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
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


# For tests only: a daemon in a process of its own (`agentd run`, killed with -9 by a test) reads the
# time from this file, which the test rewrites; the product never sets it.
CLOCK_FILE_VARIABLE = "AGENTD_TEST_CLOCK_FILE"


class FileClock:
    """The time written in a file (epoch seconds, as text), read at each look; waits poll it."""

    def __init__(self, path: Path, poll_s: float = 0.02):
        self._path, self._poll_s = path, poll_s
        self._last = 0.0

    def time(self) -> float:
        try:
            self._last = max(self._last, float(self._path.read_text().strip()))
        except (OSError, ValueError):
            pass  # mid-rewrite: the last time read stands
        return self._last

    async def sleep_until(self, when: float) -> None:
        while self.time() < when:  # noqa: ASYNC110 - it is time, not an event, awaited
            await anyio.sleep(self._poll_s)


def clock_from_environment() -> Clock:
    """The system clock, unless a test named a clock file in AGENTD_TEST_CLOCK_FILE."""
    path = os.environ.get(CLOCK_FILE_VARIABLE)
    return FileClock(Path(path)) if path else SYSTEM_CLOCK
