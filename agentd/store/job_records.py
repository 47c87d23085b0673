"""Scheduled jobs as rows: a job, each of its fires, and each delivery a fire made (an outbox).

A job's `next_fire_at` is the one time the scheduler looks at (an index on it: the next due fire is
found without reading every job); a fire is keyed by (job, scheduled time), so the same fire is
recorded once however many daemons tried it; a delivery is committed with the run that made it and
marked sent only once the platform acknowledged it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.store.records import RowShape

JOB_KINDS = ("reminder", "task", "heartbeat")
JOB_STATUSES = ("active", "paused", "cancelled", "done")
FIRE_STATUSES = ("ok", "error", "silent", "missed", "skipped")
DELIVERY_STATUSES = ("pending", "sent", "failed")


@dataclass(slots=True)
class JobRecord:
    """One job. `schedule` is the When as agentd.schedule.when stores it; `owner` the person who asked
    (`InboundEvent.who`, None for the operator's own jobs from the agent file, which `name` names);
    `user_id` the raw platform id they asked with (what an erasure names); `deliver_to` the
    conversation a fire's message goes into (for a heartbeat with `deliver: last`: None, the
    conversation the agent's people used last)."""

    id: str
    name: str | None
    conversation_key: str
    deliver_to: str | None
    owner: str | None
    user_id: str | None
    kind: str
    text: str
    schedule: dict[str, Any]
    timezone: str
    status: str
    next_fire_at: float | None
    failures: int
    created_at: float
    updated_at: float
    paused_reason: str | None = None


JOB_ROW = RowShape(JobRecord, json=("schedule",))


@dataclass(slots=True)
class FireRecord:
    """One fire of a job at its scheduled time `fire_at` (a manual run: the time it was asked for, with
    trigger `manual`, and the schedule untouched). `daemon` is stamped by the store that writes it."""

    job_id: str
    fire_at: float
    trigger: str  # schedule | catch_up | manual
    status: str  # FIRE_STATUSES
    run_id: str | None
    started_at: float
    finished_at: float
    error: str | None = None
    daemon: str | None = None


FIRE_ROW = RowShape(FireRecord)


@dataclass(slots=True)
class DeliveryRecord:
    """A message a fire made, waiting to be sent (`pending`), `sent` once the platform acknowledged it,
    or `failed` once every retry was spent."""

    id: str
    job_id: str
    fire_at: float
    conversation_key: str
    owner: str | None
    user_id: str | None
    text: str
    status: str
    attempts: int
    next_attempt_at: float
    created_at: float
    sent_at: float | None = None
    last_error: str | None = None


DELIVERY_ROW = RowShape(DeliveryRecord)
