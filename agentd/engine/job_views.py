"""An agent's scheduled jobs as the operator reads them — GET /agents/{agent}/jobs (+ one job with its
fires and deliveries), `agentd jobs AGENT`, the /ui/ jobs page — from the store alone, so the CLI
reads them the same way from a store it opens read-only.

Times are epoch seconds here (the /ui/ pages format them); `iso_times` turns them into the API's
ISO 8601 UTC texts. Each job also carries its next fire in its own zone (`next_fire_local`), as the
person who made it reads it in `/jobs`.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from agentd.engine.jobs import local_time, when_of
from agentd.schedule import WhenError
from agentd.store.base import Store
from agentd.store.job_queries import JobById, JobDeliveries, JobFires, Jobs
from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord

FIRES_SHOWN = 50
DELIVERIES_SHOWN = 50


def job_out(job: JobRecord) -> dict[str, Any]:
    """One job, JSON-ready: what it is, when it fires (the spec, in words, next in its zone), whose."""
    try:
        when = when_of(job)
        schedule, described = when.spec(), when.describe()
    except (WhenError, KeyError, TypeError, ValueError):  # a row a newer agentd wrote: show what is there
        schedule, described = str(job.schedule), "(not readable by this agentd)"
    return {
        "id": job.id,
        "name": job.name,
        "kind": job.kind,
        "text": job.text,
        "schedule": schedule,
        "describe": described,
        "timezone": job.timezone,
        "status": job.status,
        "paused_reason": job.paused_reason,
        "next_fire_at": job.next_fire_at,
        "next_fire_local": None if job.next_fire_at is None else local_time(job.next_fire_at, job.timezone),
        "failures": job.failures,
        "owner": job.owner,
        "conversation_key": job.conversation_key,
        "deliver_to": job.deliver_to,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def fire_out(fire: FireRecord) -> dict[str, Any]:
    return asdict(fire)


def delivery_out(delivery: DeliveryRecord) -> dict[str, Any]:
    out = asdict(delivery)
    out.pop("user_id")  # the platform id stays in the store; `owner` names the person
    return out


async def list_jobs(
    store: Store, *, conversation_key: str | None = None, ended: bool = False, limit: int = 500
) -> list[dict[str, Any]]:
    """The agent's jobs (one conversation's with `conversation_key`), cancelled and done ones too with
    `ended`; the oldest first."""
    jobs = await store.read(Jobs(conversation_key=conversation_key, ended=ended, limit=limit))
    return [job_out(j) for j in jobs]


async def job_detail(store: Store, job_id: str) -> dict[str, Any] | None:
    """One job with its newest fires and deliveries (newest first); None when there is no such job."""
    job = await store.read(JobById(job_id))
    if job is None:
        return None
    fires = await store.read(JobFires(job_id, FIRES_SHOWN))
    deliveries = await store.read(JobDeliveries(job_id=job_id, limit=DELIVERIES_SHOWN))
    return {
        "job": job_out(job),
        "fires": [fire_out(f) for f in fires],
        "deliveries": [delivery_out(d) for d in deliveries],
    }


def iso_times(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with its epoch `*_at` fields as ISO 8601 UTC texts (milliseconds, `Z`), as the API answers."""
    return {k: _iso(v) if k.endswith("_at") and isinstance(v, int | float) else v for k, v in row.items()}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
