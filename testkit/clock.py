"""A clock the test moves: `advance(seconds)` / `set(epoch)` wake every `sleep_until` that is due."""

from __future__ import annotations

import anyio


class ManualClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def time(self) -> float:
        return self._now

    async def sleep_until(self, when: float) -> None:
        if when <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        woken = anyio.Event()
        entry = (when, woken)
        self._sleepers.append(entry)
        try:
            await woken.wait()
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def set(self, epoch: float) -> None:
        self._now = max(self._now, epoch)  # a wall clock the tests hold never runs backwards
        due = [s for s in self._sleepers if s[0] <= self._now]
        for entry in due:
            self._sleepers.remove(entry)
            entry[1].set()

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    @property
    def sleepers(self) -> int:
        """How many waits are pending (a test can wait for the code under test to start waiting)."""
        return len(self._sleepers)
