"""Reads of scheduled jobs, their fires and deliveries (agentd/store/job_records.py), as data: each
backend answers them in its jobs module (agentd/store/sqlite/jobs.py, agentd/store/postgres/jobs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord
from agentd.store.queries import Query


@dataclass(frozen=True, slots=True)
class NextFireAt(Query[float | None]):
    """The earliest next fire of an active job (read off the index on it), None when none is due ever."""


@dataclass(frozen=True, slots=True)
class DueJobs(Query[list[JobRecord]]):
    """Active jobs whose next fire is at or before `now`, the most overdue first."""

    now: float
    limit: int = 100


@dataclass(frozen=True, slots=True)
class JobById(Query[JobRecord | None]):
    id: str


@dataclass(frozen=True, slots=True)
class JobNamed(Query[JobRecord | None]):
    """The agent file's job of this name (the operator's), in any status."""

    name: str


@dataclass(frozen=True, slots=True)
class Jobs(Query[list[JobRecord]]):
    """Jobs of one conversation, or of one owner, or all; cancelled and done ones only with `ended`;
    with `named`, only the agent file's (read off the index on names, not every row); the oldest first."""

    conversation_key: str | None = None
    owner: str | None = None
    ended: bool = False
    limit: int = 500
    named: bool = False


@dataclass(frozen=True, slots=True)
class JobFires(Query[list[FireRecord]]):
    """A job's newest fires, newest first."""

    job_id: str
    limit: int = 50


@dataclass(frozen=True, slots=True)
class JobDeliveries(Query[list[DeliveryRecord]]):
    """Deliveries of one job (or all), of one status (or any), newest first."""

    job_id: str | None = None
    status: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class DueDeliveries(Query[list[DeliveryRecord]]):
    """Pending deliveries whose next attempt is at or before `now`, the oldest first."""

    now: float
    limit: int = 100


@dataclass(frozen=True, slots=True)
class NextDeliveryAt(Query[float | None]):
    """When the earliest pending delivery is next tried (None: nothing pending)."""


@dataclass(frozen=True, slots=True)
class JobTotals(Query[dict[str, int]]):
    """Jobs per status and deliveries per status, as `jobs_<status>` / `deliveries_<status>` counts."""


@dataclass(frozen=True, slots=True)
class PersonJobs(Query[dict[str, list[dict[str, Any]]]]):
    """A person's jobs (owned by them: `user_id` is the id they asked with, or their person) and the
    deliveries still waiting for them, JSON-ready: what their export lists."""

    user_id: str
