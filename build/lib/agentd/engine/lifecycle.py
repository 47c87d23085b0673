"""An agent's lifecycle: its status, the runs in flight (and their after-run work), draining."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any


class Lifecycle:
    def __init__(self) -> None:
        self.status = "starting"  # starting | running | error | stopped
        self.last_error: str | None = None
        self.started_at = time.time()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._background: set[asyncio.Task[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        # told when the agent fails after it started (its data found written by a newer agentd)
        self.on_fail: Callable[[str], Awaitable[None]] | None = None

    async def fail(self, reason: str) -> None:
        """The agent cannot serve until its definition is reloaded or the daemon restarts."""
        first = self.status != "error"
        self.status, self.last_error = "error", reason
        if first and self.on_fail is not None:
            await self.on_fail(reason)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Counts as in flight (drain waits for it) while inside."""
        self._enter()
        try:
            yield
        finally:
            self._leave()

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """Inside `busy`: not counted while inside (waiting for a person is not work in flight)."""
        self._leave()
        try:
            yield
        finally:
            self._enter()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run work in the background, counted as in flight from now until it ends."""
        self._enter()
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)

        def done(finished: asyncio.Task[Any]) -> None:
            self._background.discard(finished)
            self._leave()

        task.add_done_callback(done)

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        """Call `callback` after `delay` seconds, unless the agent stops first (`cancel_later`)."""

        def fire() -> None:
            self._timers.discard(handle)
            callback()

        handle = asyncio.get_running_loop().call_later(delay, fire)
        self._timers.add(handle)

    def cancel_later(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait for in-flight runs (and their after-run work) to finish; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False
