"""One fire of one job: a reminder's text as written (no model call), a task's run of the agent with
its prompt, a heartbeat's run that may have nothing to say — each written in one commit with the
fire's record, the job moved on to its next fire, and the message to deliver (an outbox row).

The fire is done exactly when that commit is: a daemon killed before it leaves the job due (another
one, or the next start, fires it); one that lost the job's lease while stalled finds the fire
recorded and the job moved on (CompleteFire refuses), so nothing of its run is kept.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentd.engine.agent import Agent
from agentd.engine.jobs import when_of
from agentd.engine.scheduled import ScheduledRun
from agentd.events import InboundEvent
from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord
from agentd.store.job_writes import CompleteFire, InsertDelivery
from agentd.store.queries import Conversations
from agentd.store.records import AuditRecord, RunRecord
from agentd.store.writes import AppendAudit, InsertRun, RowMissing, Write

log = logging.getLogger(__name__)
HEARTBEAT_NOTE = (
    "This is a scheduled check-in, not a message from the person. If there is nothing they should "
    "hear about now, answer with an empty reply: then nothing is sent and nothing is kept."
)


@dataclass(frozen=True, slots=True)
class FireOutcome:
    status: str  # ok | error | silent | skipped | taken (another daemon fired it first)
    run_id: str | None = None
    delivery: str | None = None  # the delivery's id when a message is waiting to be sent
    paused: bool = False
    error: str | None = None


async def fire_job(agent: Agent, job: JobRecord, fire_at: float, trigger: str, by: str) -> FireOutcome:
    """Fire `job` for its time `fire_at` (`trigger`: schedule, catch_up or manual; `by` names who
    asked for a manual one, `scheduler` otherwise); `taken` when the fire was recorded elsewhere."""
    try:
        if job.kind == "reminder":
            return await _remind(agent, job, fire_at, trigger, by)
        return await _run(agent, job, fire_at, trigger, by)
    except RowMissing:
        return FireOutcome("taken")


class _Fire:
    """What a fire writes, given how its run went."""

    def __init__(self, agent: Agent, job: JobRecord, fire_at: float, trigger: str, by: str):
        self.agent, self.job, self.fire_at, self.trigger, self.by = agent, job, fire_at, trigger, by
        self.clock = agent.state.jobs.clock
        self.started = self.clock.time()
        self.outcome = FireOutcome("ok")

    def writes(
        self, text: str, run: RunRecord | None, status: str, error: str | None = None
    ) -> list[Write[Any]]:
        job, now = self.job, self.clock.time()
        schedule = self.agent.spec.schedule
        failures = job.failures + 1 if status == "error" else 0
        limit = schedule.pause_after_failures if schedule is not None else None
        paused = limit is not None and failures >= limit
        next_fire = when_of(job).next_after(max(now, self.fire_at))
        job_status = (
            "paused" if paused else ("done" if next_fire is None and self.trigger != "manual" else "active")
        )
        reason = f"paused after {failures} failed runs in a row (last: {error})" if paused else None
        run_id = run.id if run is not None else None
        fire = FireRecord(job.id, self.fire_at, self.trigger, status, run_id, self.started, now, error)
        ops: list[Write[Any]] = [CompleteFire(fire, next_fire, failures, job_status, reason, now)]
        if paused:
            text = f"Job {job.id} is paused: {reason}. Say /jobs resume {job.id} to start it again."
        delivery = None
        if text:
            delivery = DeliveryRecord(
                id=uuid.uuid4().hex,
                job_id=job.id,
                fire_at=self.fire_at,
                conversation_key=self.target,
                owner=job.owner,
                user_id=job.user_id,
                text=text,
                status="pending",
                attempts=0,
                next_attempt_at=now,
                created_at=now,
            )
            ops.append(InsertDelivery(delivery))
        data: dict[str, Any] = {"job": job.id, "trigger": self.trigger, "status": status, "by": self.by}
        data |= {"fire_at": self.fire_at, "late_s": round(self.started - self.fire_at, 3), "run_id": run_id}
        records = [AuditRecord("job", "fire", self.target, run_id, data)]
        if paused:
            pause = {"job": job.id, "by": "scheduler", "reason": reason}
            records.append(AuditRecord("job", "pause", self.target, run_id, pause))
        ops.append(AppendAudit(self.agent.name, records, now))
        self.outcome = FireOutcome(status, run_id, delivery.id if delivery else None, paused, error)
        return ops

    conversation: str | None = None  # the heartbeat's (deliver: last), found at fire time

    @property
    def target(self) -> str:
        return self.job.deliver_to or self.conversation or self.job.conversation_key


async def _remind(agent: Agent, job: JobRecord, fire_at: float, trigger: str, by: str) -> FireOutcome:
    """A reminder is delivered as written: no model call (it is not the agent's to answer)."""
    fire = _Fire(agent, job, fire_at, trigger, by)
    now = fire.clock.time()
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=fire.target,
        trigger="schedule",
        model=None,
        status="ok",
        started_at=now,
        duration_ms=0.0,
    )
    ops: Sequence[Write[Any]] = [InsertRun(run), *fire.writes(f"Reminder: {job.text}", run, "ok")]
    await agent.state.store.write(*ops)
    return fire.outcome


async def _run(agent: Agent, job: JobRecord, fire_at: float, trigger: str, by: str) -> FireOutcome:
    """A task (or a heartbeat): the agent answers the job's prompt in the job's conversation."""
    fire = _Fire(agent, job, fire_at, trigger, by)
    heartbeat = job.kind == "heartbeat"
    if heartbeat and job.deliver_to is None:
        latest = await agent.state.store.read(Conversations(limit=1))
        if not latest:  # nobody has talked to the agent yet: nobody to check in with
            await agent.state.store.write(*fire.writes("", None, "skipped"))
            return fire.outcome
        fire.conversation = str(latest[0]["conversation_key"])
    beat = agent.spec.schedule.heartbeat if agent.spec.schedule is not None else None
    hours = beat.hours if heartbeat and beat is not None else None
    if hours is not None and not hours.contains(fire.started, job.timezone):
        await agent.state.store.write(*fire.writes("", None, "skipped"))  # outside its active hours
        return fire.outcome
    text = f"{HEARTBEAT_NOTE}\n\n{job.text}" if heartbeat else job.text
    event = InboundEvent(
        agent=agent.name,
        conversation_key=fire.target,
        text=text,
        channel=fire.target.partition(":")[0],
        person=job.owner,  # the job's tools act for its owner
        metadata={"job": job.id},
    )

    def writes(reply: str, run: RunRecord) -> Sequence[Write[Any]]:
        status = "error" if run.status == "error" else ("silent" if not reply else "ok")
        return fire.writes(reply if status != "error" else "", run, status, run.error)

    await agent.handle_scheduled(event, ScheduledRun(writes, quiet_when_empty=heartbeat))
    return fire.outcome
