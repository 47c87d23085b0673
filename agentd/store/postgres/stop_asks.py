"""agentd.store.stop_asks on the shared database: asks as rows, woken by LISTEN, polled as well.

Both waits (an asker's for its answer, a daemon's for the asks addressed to it) wake on the
notifications the Wakeups connection hears, and poll besides: often behind a pooler in transaction
mode (no LISTEN there: `store.pooler: transaction`) or while that connection is down, seldom
otherwise (a lost notification then costs at most that).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg

from agentd.store.postgres.executor import PgExecutor
from agentd.store.postgres.stop_sql import ANSWER, ASK, COLLECT, TAKE, WITHDRAW
from agentd.store.postgres.wakeups import Wakeups
from agentd.store.stop_asks import StopAnswer, StopAsk

POLL_S = 0.25  # how often an asker looks for its answer without notifications
TAKE_POLL_S = 0.5  # how often a daemon looks for asks addressed to it without notifications
LISTENING_POLL_S = 5.0  # both, while notifications are heard (a safety net only)


class PgStopAsks:
    def __init__(self, executor: PgExecutor, wakeups: Wakeups, daemon: str):
        self._executor = executor
        self._wakeups = wakeups
        self._daemon = daemon

    @property
    def daemon(self) -> str:
        return self._daemon

    async def ask(self, agent: str, conversation_key: str, reason: str, by: str | None) -> int | None:
        args = {"agent": agent, "key": conversation_key, "reason": reason, "by": by, "me": self._daemon}
        rows = await self._rows(ASK, args)
        return int(rows[0][0]) if rows else None

    async def answer_of(self, ask_id: int, wait_s: float) -> StopAnswer | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        payload = f"done:{ask_id}"
        woken = self._wakeups.watch(payload)  # before the first look: an answer in between is seen by it
        try:
            while True:
                rows = await self._rows(COLLECT, (ask_id,))
                if rows:
                    return StopAnswer(rows[0][0], str(rows[0][1]))
                left = deadline - loop.time()
                if left <= 0:
                    break
                await _woken_or(woken, min(left, self._poll(POLL_S)))
        finally:
            self._wakeups.unwatch(payload)
        rows = await self._rows(WITHDRAW, (ask_id,))
        if rows and rows[0][0]:
            return StopAnswer(rows[0][1], str(rows[0][2]))
        return None

    async def taken(self, wait_s: float) -> list[StopAsk]:
        payload = f"ask:{self._daemon}"
        woken = self._wakeups.watch(payload)
        try:
            asks = await self._take()
            if not asks:
                await _woken_or(woken, min(wait_s, self._poll(TAKE_POLL_S)))
                asks = await self._take()
            return asks
        finally:
            self._wakeups.unwatch(payload)

    async def answer(self, ask_id: int, run_id: str | None) -> None:
        await self._rows(ANSWER, (run_id, self._daemon, ask_id))

    def _poll(self, without_notifications: float) -> float:
        return LISTENING_POLL_S if self._wakeups.listening.is_set() else without_notifications

    async def _take(self) -> list[StopAsk]:
        rows = await self._rows(TAKE, (self._daemon,))
        return [StopAsk(int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4], str(r[5])) for r in rows]

    async def _rows(self, sql: str, args: Any) -> list[tuple[Any, ...]]:
        def job(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()  # type: ignore[arg-type]  # (literal SQL)

        return await self._executor.call(job)


async def _woken_or(woken: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(woken.wait(), timeout_s)
    woken.clear()
