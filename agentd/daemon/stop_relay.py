"""Answering the stops other daemons ask of this one (a store several daemons share).

`/stop` that reaches a daemon other than the one running the turn is written as a stop ask addressed
to the runner (agentd.engine.stop_anywhere, agentd.store.stop_asks). This loop takes the asks
addressed to this daemon as they come, stops each turn as its own `/stop` would (each ask in a task
of its own: one waits for its run's commit, the next need not wait behind it), and answers with the
stopped run, or none when nothing it runs could be stopped (the agent is gone, the turn just ended).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agentd.backoff import backoff_delays
from agentd.engine.agent import Agent
from agentd.engine.stop_request import Stop
from agentd.errors import StoreError
from agentd.store.stop_asks import StopAsk, StopAsks

log = logging.getLogger(__name__)
WAIT_S = 30.0  # the most one look waits for an ask (the store's own poll comes sooner without LISTEN)


async def relay_stops(asks: StopAsks, agent_of: Callable[[str], Agent | None]) -> None:
    """Until cancelled: take the asks addressed to this daemon and answer each."""
    tasks: set[asyncio.Task[None]] = set()
    delays = backoff_delays(1.0, 30.0)
    while True:
        try:
            taken = await asks.taken(WAIT_S)
        except StoreError as e:  # the database away: asks wait in it (or their askers give up)
            log.warning("taking the stops other daemons asked failed (%s); trying again", e)
            await asyncio.sleep(next(delays))
            continue
        delays = backoff_delays(1.0, 30.0)
        for ask in taken:
            task = asyncio.create_task(_answer(asks, ask, agent_of(ask.agent)), name=f"agentd-stop-{ask.id}")
            tasks.add(task)
            task.add_done_callback(tasks.discard)


async def _answer(asks: StopAsks, ask: StopAsk, agent: Agent | None) -> None:
    run_id = None
    try:
        if agent is not None:
            stop = Stop(ask.reason, by=ask.by, asked_on=ask.asked_on)
            run_id = await agent.stop_asked(ask.conversation_key, stop)
        await asks.answer(ask.id, run_id)
    except StoreError as e:  # (the asker gives up after its wait: "nothing stopped")
        log.warning("answering the stop of %s asked on %s failed: %s", ask.conversation_key, ask.asked_on, e)
        return
    except Exception:
        log.exception("stopping %s, as asked on %s, failed", ask.conversation_key, ask.asked_on)
        await asks.answer(ask.id, None)
        return
    log.info(
        "stop of %s asked on %s by %s: %s",
        ask.conversation_key,
        ask.asked_on,
        ask.by,
        f"run {run_id} stopped" if run_id else "nothing to stop",
    )
