"""Stopping a conversation's running turn: `/stop`, the webhook's stop route, and `max_run_s`.

A turn is registered while it runs (`RunStops.running`, by the event handler). A stop cancels
the task that runs it, wherever it waits: the model call (its HTTP request is closed), the tool
calls (an MCP call cancelled sends the server `notifications/cancelled`). The turn takes that
cancellation as its own (`Running.caught`), keeps the person's message, the tool steps that
completed and, of a streamed reply, only what was shown (marked stopped), and commits as a
stopped run; a cancellation that is no stop (the daemon shutting down) goes on as one.

Once the turn starts its commit (`Running.committing`) nothing stops it: a commit cut in half
would be the half-written state a stop must never leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator

from agentd.clock import SYSTEM_CLOCK, Clock, SystemClock
from agentd.engine.progress import TurnProgress
from agentd.engine.stop_request import BY_TIME, STOP_WAIT_S, Stop
from agentd.engine.streaming import StepSink
from agentd.messages import Message, TextPart, ToolResultPart
from agentd.store.records import AuditRecord


class Running:
    """One turn in flight: the task to cancel, its deadline (`max_run_s`), and the stop that cancelled it."""

    def __init__(self, task: asyncio.Task[object] | None, deadline: float = math.inf, max_run_s: float = 0.0):
        self.task = task
        self.deadline, self.max_run_s = deadline, max_run_s
        self.run_id: str | None = None
        self.stop: Stop | None = None
        self.stoppable = False  # until the turn's loop begins (`RunStops.watch`): a stop before it waits
        self.finished = asyncio.Event()

    def caught(self) -> Stop | None:
        """In the turn's `except CancelledError`: the stop when the cancellation was one (then taken
        back, so the turn goes on to commit), None when it was not (it must go on)."""
        if self.stop is None or self.task is None:
            return None
        self.task.uncancel()
        self.stoppable = False
        return self.stop

    def committing(self) -> None:
        """The turn's commit begins: a stop from now on finds nothing to stop."""
        self.stoppable = False


# ends the run of a conversation paused for an approval, as a stop (its id), None when none waits
EndPaused = Callable[[str, Stop], Awaitable[str | None]]


async def _none_paused(key: str, stop: Stop) -> str | None:
    return None


NOT_REGISTERED = Running(None)  # a turn nobody can stop (run outside the event handler: a direct call)


class RunStops:
    """The turns of one agent running now, by conversation key.

    `max_run_s` costs no timer per turn: one wake-up, set for the earliest deadline, stops the turns
    past theirs and is set again for the next (a turn that ended before its deadline costs nothing).
    On the real clock it is a timer of the loop; on another (a test's ManualClock) a task waiting on
    that clock, which goes when no turn is left.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock  # tests hold a ManualClock here: max_run_s without waiting
        self._running: dict[str, Running] = {}
        self._wake: asyncio.TimerHandle | asyncio.Task[None] | None = None
        self._wake_at = math.inf
        # a run paused for an approval is not running: its agent's approvals end it (approvals.py)
        self.end_paused: EndPaused = _none_paused

    @contextlib.contextmanager
    def running(self, key: str, max_run_s: float) -> Iterator[Running]:
        """The turn of `key` that the current task runs, stoppable (once its loop begins) until it
        commits; stopped by itself past `max_run_s`."""
        running = Running(asyncio.current_task(), self.clock.time() + max_run_s, max_run_s)
        self._running[key] = running
        if running.deadline < self._wake_at:
            self._arm(running.deadline)
        try:
            yield running
        finally:
            if self._running.get(key) is running:
                del self._running[key]
            running.finished.set()
            if not self._running and isinstance(self._wake, asyncio.Task):
                self._wake.cancel()  # a test clock's waiting task goes with the last turn
                self._wake, self._wake_at = None, math.inf

    def _arm(self, deadline: float) -> None:
        if self._wake is not None:
            self._wake.cancel()
        self._wake_at = deadline
        loop = asyncio.get_running_loop()
        if isinstance(self.clock, SystemClock):
            # a run's limit is a duration: the loop's monotonic timer, not the wall clock, measures it
            self._wake = loop.call_later(max(0.0, deadline - self.clock.time()), self._past_deadlines)
        else:
            self._wake = loop.create_task(self._wait_for(deadline))

    async def _wait_for(self, deadline: float) -> None:
        await self.clock.sleep_until(deadline)
        self._wake = None  # (done: not to be cancelled by the turns it stops)
        self._past_deadlines()

    def _past_deadlines(self) -> None:
        """Stop every turn past its deadline; wake again at the next one."""
        self._wake, self._wake_at = None, math.inf
        now = self.clock.time()
        for key, running in list(self._running.items()):
            if running.deadline <= now:
                self.stop(key, Stop(BY_TIME, max_run_s=running.max_run_s))
        later = [r.deadline for r in self._running.values() if r.deadline > now]
        if later:
            self._arm(min(later))

    def watch(self, key: str, run_id: str) -> Running:
        """The turn's own registration (NOT_REGISTERED when it runs outside one), called just before
        its model/tool loop: a stop that came while the turn was being set up lands at the loop's
        first wait."""
        running, task = self._running.get(key), asyncio.current_task()
        if running is None or task is None or running.task is not task:
            return NOT_REGISTERED
        running.run_id = run_id
        running.stoppable = True
        if running.stop is not None:
            task.cancel()
        return running

    def stop(self, key: str, stop: Stop) -> Running | None:
        """Stop the turn of `key`; the Running to wait on (`finished`), None when nothing runs that
        can still be stopped."""
        running = self._running.get(key)
        if running is None or running.task is None:
            return None
        if running.stop is not None:
            return running  # already being stopped: the caller waits for the same end
        if running.run_id is not None and not running.stoppable:
            return None  # committing: it ends by itself
        running.stop = stop
        if running.stoppable:
            running.task.cancel()
        return running

    def running_in(self, key: str) -> bool:
        return key in self._running


def stopped_turn(progress: TurnProgress, sink: StepSink | None, stop: Stop) -> str:
    """Leave the stopped turn's messages well-formed and honest, audit the stop; the reply's text.

    Tool calls in flight are answered as stopped (every stored call has its result); a reply that
    was streaming is kept as what was shown, marked `stopped`; nothing the model had not yet shown
    is kept."""
    run = progress.run
    stopped_calls = 0
    if progress.batch is not None:
        batch = progress.batch
        while (call := batch.next_call) is not None:
            batch.results.append(
                ToolResultPart(
                    call_id=call.id,
                    name=call.name,
                    content="not finished: the run was stopped",
                    is_error=True,
                )
            )
            stopped_calls += 1
        progress.new.append(batch.message())
        progress.batch = None
    shown = sink.shown if sink is not None and sink.showing else ""
    if shown:
        progress.new.append(Message(role="assistant", parts=(TextPart(text=shown),), stopped=True))
    run.status, run.error = "stopped", f"stopped ({stop.reason})"
    data: dict[str, object] = {
        "reason": stop.reason,
        "shown_chars": len(shown),
        "tool_calls_stopped": stopped_calls,
    }
    if stop.by is not None:
        data["by"] = stop.by
    if stop.max_run_s is not None:
        data["max_run_s"] = stop.max_run_s
    if stop.asked_on is not None:
        data["asked_on"] = stop.asked_on
    progress.audit.append(AuditRecord("run", "stopped", run.conversation_key, run.id, data))
    return f"{shown}\n\n{stop.said()}" if shown else stop.said()


async def stop_and_wait(stops: RunStops, key: str, stop: Stop) -> Running | None:
    """Stop the turn of `key` and wait (bounded) until its stopped run is committed; None when
    nothing could be stopped."""
    running = stops.stop(key, stop)
    if running is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(running.finished.wait(), STOP_WAIT_S)
    return running
