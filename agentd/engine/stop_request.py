"""What a stop is: why it was asked (`/stop`, the HTTP route, `max_run_s`), by whom, and where.

Apart from agentd.engine.stopping (which stops the turns) so that a paused run's decision
(agentd.engine.progress) can carry the stop that ended it.
"""

from __future__ import annotations

from dataclasses import dataclass

BY_COMMAND = "command"  # /stop in the conversation
BY_API = "api"  # POST /agents/{agent}/conversations/{key}/stop
BY_TIME = "max_run_s"  # the run went past the agent's max_run_s
STOP_WAIT_S = 10.0  # the most a stop waits for the stopped run's commit before answering


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str  # BY_COMMAND | BY_API | BY_TIME
    by: str | None = None  # who asked (a user id, http:<client>), None for max_run_s
    max_run_s: float | None = None  # the limit passed, for BY_TIME
    asked_on: str | None = None  # the daemon the stop was asked on, when another one (a shared store)

    def said(self) -> str:
        """What the person is told (after what was shown)."""
        if self.reason == BY_TIME:
            return f"(Stopped: this run went past its limit of {self.max_run_s:g} s. Your message is saved.)"
        return "(Stopped.)"


class StoppedWaiting(Exception):
    """A run paused for an approval, resumed by a /stop: it ends as a stopped turn (agentd.engine.turn)."""

    def __init__(self, stop: Stop):
        super().__init__(stop.reason)
        self.stop = stop
