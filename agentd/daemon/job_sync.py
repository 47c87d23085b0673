"""The agent file's jobs and heartbeat as job rows: made at start, updated in place at a reload (same
id, its fires kept), cancelled when the file no longer has them. They are the operator's (no owner)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentd.clock import Clock
from agentd.config.schedule import DeliverySpec, ScheduleSpec
from agentd.engine.agent import Agent
from agentd.engine.jobs import new_job_id, schedule_of, when_of
from agentd.schedule import When, WhenError, parse_duration, parse_when
from agentd.store.job_queries import Jobs
from agentd.store.job_records import JobRecord
from agentd.store.job_writes import InsertJob, UpdateJob
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, Write

HEARTBEAT = "@heartbeat"  # not a valid job name in the file: it cannot collide with one


def deliver_key(deliver: DeliverySpec) -> str:
    """The conversation a file job delivers into (and a task runs in)."""
    return f"{deliver.channel}:{deliver.to or 'deliver_url'}"


async def sync_file_jobs(agent: Agent, clock: Clock) -> None:
    schedule = agent.spec.schedule
    store, now = agent.state.store, clock.time()
    wanted = _wanted(schedule, now) if schedule is not None else {}
    have = {
        j.name: j for j in await store.read(Jobs(ended=True, limit=100_000, named=True)) if j.name is not None
    }
    ops: list[Write[Any]] = []
    audits: list[AuditRecord] = []
    for name, (kind, text, when, target) in wanted.items():
        old = have.get(name)
        if old is None:
            job = JobRecord(
                new_job_id(),
                name,
                target or "",
                target,
                None,
                None,
                kind,
                text,
                schedule_of(when),
                when.tz,
                "active",
                when.next_after(now),
                0,
                now,
                now,
            )
            ops.append(InsertJob(job))
            audits.append(
                AuditRecord("job", "create", target, None, {"job": job.id, "name": name, "by": "file"})
            )
            continue
        same_when = when_of(old).spec() == when.spec() and old.timezone == when.tz
        if (
            same_when
            and (old.kind, old.text, old.deliver_to) == (kind, text, target)
            and old.status != "cancelled"
        ):
            continue
        changed = replace(
            old,
            kind=kind,
            text=text,
            deliver_to=target,
            conversation_key=target or "",
            updated_at=now,
            status="active" if old.status == "cancelled" else old.status,
        )
        if not same_when or old.status == "cancelled":
            changed = replace(
                changed, schedule=schedule_of(when), timezone=when.tz, next_fire_at=when.next_after(now)
            )
        ops.append(UpdateJob(changed))
        audits.append(AuditRecord("job", "update", target, None, {"job": old.id, "name": name, "by": "file"}))
    for name, old in have.items():
        if name not in wanted and old.status in ("active", "paused"):
            ops.append(UpdateJob(replace(old, status="cancelled", updated_at=now)))
            audits.append(
                AuditRecord(
                    "job", "cancel", old.deliver_to, None, {"job": old.id, "name": name, "by": "file"}
                )
            )
    if ops:
        await store.write(*ops, AppendAudit(agent.name, audits, now))


def _wanted(schedule: ScheduleSpec, now: float) -> dict[str, tuple[str, str, When, str | None]]:
    out: dict[str, tuple[str, str, When, str | None]] = {}
    for name, job in schedule.jobs.items():
        try:
            when = job.when(schedule.timezone, now=now)
        except WhenError:
            continue  # an `at:` passed since the file was checked: nothing more to fire
        out[name] = (job.kind, job.prompt, when, deliver_key(job.deliver))
    beat = schedule.heartbeat
    if beat is not None:
        when = parse_when({"every": parse_duration(beat.every)}, schedule.timezone, now=now)
        target = None if beat.deliver == "last" else deliver_key(beat.deliver)
        out[HEARTBEAT] = ("heartbeat", beat.prompt, when, target)
    return out
