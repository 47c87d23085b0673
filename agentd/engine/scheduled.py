"""What a scheduled run (a job's task, a heartbeat) adds to a turn: its fire's record and delivery,
written in the run's own commit, and whether an empty reply means "nothing to say"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentd.store.records import RunRecord
from agentd.store.writes import Write


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    # what the fire writes with the run, given the reply's text ("" for a silent heartbeat) and the
    # run's row (its status and error): the fire's record, the job moved on, the delivery, the audit
    writes: Callable[[str, RunRecord], Sequence[Write[Any]]]
    # a heartbeat: an empty reply is its structured "nothing to report" — no transcript turn, nothing sent
    quiet_when_empty: bool = False
