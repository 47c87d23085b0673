"""Stopping a conversation's run wherever it is: the turn running on this daemon, the run here paused
for a person's approval, or, on a store several daemons share, the turn another daemon runs.

`/stop` and the HTTP stop route may reach any daemon of those sharing a PostgreSQL store, while
the turn runs on the one holding the conversation's claim. When nothing here can be stopped, this
daemon asks that one (agentd.store.stop_asks), which stops it as its own `/stop` would (the audit's
`run/stopped` then names both: `by` who asked, `asked_on` this daemon, the event's `daemon` the one
that stopped it), and waits for its answer, bounded: a daemon that never answers (killed) leaves
the answer "nothing was stopped".
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.engine.state import AgentState
from agentd.engine.stop_request import STOP_WAIT_S, Stop
from agentd.engine.stopping import stop_and_wait

# the running daemon waits up to STOP_WAIT_S for the stopped run's commit, then answers: a little more
ASK_WAIT_S = STOP_WAIT_S + 2.0


@dataclass(frozen=True, slots=True)
class Stopped:
    """A run that a stop ended: its id, and the daemon that stopped it."""

    run_id: str | None
    daemon: str


async def stop_here(state: AgentState, key: str, stop: Stop) -> Stopped | None:
    """Stop the conversation's turn running on this daemon, else its run paused here for an approval;
    None when neither is."""
    daemon = state.resources.stop_asks.daemon
    running = await stop_and_wait(state.stops, key, stop)
    if running is not None:
        return Stopped(running.run_id, daemon)
    run_id = await state.stops.end_paused(key, stop)
    return None if run_id is None else Stopped(run_id, daemon)


async def stop_anywhere(state: AgentState, key: str, stop: Stop) -> Stopped | None:
    """`stop_here`, then (a shared store) the daemon that holds the conversation; None when nothing
    was stopped."""
    stopped = await stop_here(state, key, stop)
    if stopped is not None or not state.store.shared:
        return stopped
    asks = state.resources.stop_asks
    ask = await asks.ask(state.name, key, stop.reason, stop.by)
    if ask is None:
        return None  # no other daemon holds the conversation: nothing runs there
    answer = await asks.answer_of(ask, ASK_WAIT_S)
    if answer is None or answer.run_id is None:
        return None
    return Stopped(answer.run_id, answer.daemon)
