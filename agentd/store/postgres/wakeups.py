"""Waking claims that wait: LISTEN on its own connection, one asyncio.Event per watched conversation
(and per watched stop ask: agentd/store/postgres/stop_asks.py).

A waiting claim watches its conversation's queue (by the digest agentd_release notifies) before it
takes its ticket, so a release between its ticket and its wait is never missed. The claims poll as
well, so a notification lost with a broken connection only makes a waiter later, never stuck; the
listener reconnects after a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg

from agentd.backoff import backoff_delays
from agentd.store.postgres.claim_sql import NOTIFY_CHANNEL
from agentd.store.postgres.connection import connect_async
from agentd.store.postgres.stop_sql import STOP_CHANNEL

log = logging.getLogger(__name__)
RECONNECT_AFTER_S = 1.0  # then doubling, up to
MAX_RECONNECT_AFTER_S = 30.0


class Wakeups:
    def __init__(self, url: str, label: str):
        self._url = url
        self._label = label
        self._watched: dict[str, tuple[asyncio.Event, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while LISTEN is in effect (tests wait for it)

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="agentd-pg-listen")

    async def close(self) -> None:
        await stopped(self._task)
        self._task = None

    def watch(self, digest: str) -> asyncio.Event:
        event, watchers = self._watched.get(digest, (asyncio.Event(), 0))
        self._watched[digest] = (event, watchers + 1)
        return event

    def unwatch(self, digest: str) -> None:
        event, watchers = self._watched[digest]
        if watchers > 1:
            self._watched[digest] = (event, watchers - 1)
        else:
            del self._watched[digest]

    def _wake(self, digest: str) -> None:
        watched = self._watched.get(digest)
        if watched is not None:
            watched[0].set()

    async def _listen(self) -> None:
        delays = backoff_delays(RECONNECT_AFTER_S, MAX_RECONNECT_AFTER_S)
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await connect_async(self._url)
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                await conn.execute(
                    f"LISTEN {STOP_CHANNEL}"
                )  # stop asks (stop_asks.py): payloads of their own
                self.listening.set()
                delays = backoff_delays(RECONNECT_AFTER_S, MAX_RECONNECT_AFTER_S)  # (connected: start over)
                async for note in conn.notifies():
                    self._wake(note.payload)
            except psycopg.Error as e:
                log.warning(
                    "%s: listening for released claims failed (%s); polling meanwhile", self._label, e
                )
            finally:
                self.listening.clear()
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()
            await asyncio.sleep(next(delays))


async def stopped(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task of the backend and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
