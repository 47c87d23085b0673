"""The run a log line belongs to: set by the engine when a run starts, read by the log formatter.

A contextvar, so every line logged while a run's task (and the tasks it starts) is
working carries that run's id without any code passing it along.
"""

from __future__ import annotations

from contextvars import ContextVar

current_run: ContextVar[str | None] = ContextVar("agentd_current_run", default=None)
