"""Writes of scheduled jobs, their fires and deliveries, as data (see agentd/store/writes.py for how
a batch is applied). A fire's record, the job's next fire and its delivery are written in the batch of
the run that fired it: the fire is then done exactly when its run is."""

from __future__ import annotations

from dataclasses import dataclass

from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord
from agentd.store.writes import Write


@dataclass(frozen=True, slots=True)
class InsertJob(Write[None]):
    job: JobRecord


@dataclass(frozen=True, slots=True)
class UpdateJob(Write[None]):
    """Replace the job's row (its id stays); RowMissing when there is no such job."""

    job: JobRecord


@dataclass(frozen=True, slots=True)
class CompleteFire(Write[None]):
    """Record a fire and move its job on: `next_fire_at`, `failures`, `status` (a job that keeps failing
    pauses: `paused_reason`). A scheduled fire (trigger schedule or catch_up) refuses with RowMissing
    when the job's next fire is no longer `fire.fire_at` (another daemon fired it, or the job was
    changed meanwhile), or when this fire is recorded already: then nothing of its batch (its run,
    its delivery) is kept. A manual fire leaves the schedule alone (`next_fire_at` is ignored). The
    store stamps the fire with the daemon that wrote it."""

    fire: FireRecord
    next_fire_at: float | None
    failures: int
    status: str
    paused_reason: str | None
    now: float


@dataclass(frozen=True, slots=True)
class InsertDelivery(Write[None]):
    delivery: DeliveryRecord


@dataclass(frozen=True, slots=True)
class DeliveryAttempt(Write[None]):
    """What one attempt to send a delivery came to: `sent` (the platform acknowledged it, at `sent_at`),
    `pending` again (retried at `next_attempt_at`) or `failed` (given up); `error` the reason."""

    id: str
    status: str
    attempts: int
    next_attempt_at: float
    sent_at: float | None
    error: str | None


@dataclass(frozen=True, slots=True)
class DeletePersonJobs(Write[dict[str, int]]):
    """Delete every job a person owns (`user_id` as they asked with it, or their person), with the jobs'
    fires and every delivery made for them (pending or not): their erasure. The result is the counts
    (`jobs`, `deliveries`)."""

    user_id: str
