"""One agent's scheduled jobs as the chat, `/jobs` and the operator change them: made, changed,
paused, resumed, cancelled — each checked (a reason the model or the person reads when refused),
owned by the person who asked, and audited naming them.

The job book only records; firing is the scheduler's (agentd/daemon/scheduler.py), which it tells
when a job's next fire may have moved (`on_change`) and asks to run one now (`run_now`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agentd.clock import Clock
from agentd.config.models import AgentSpec
from agentd.schedule import When, WhenError, parse_when, zone
from agentd.store.base import Store
from agentd.store.job_queries import JobById, Jobs
from agentd.store.job_records import JobRecord
from agentd.store.job_writes import InsertJob, UpdateJob
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit

MAX_TEXT_CHARS = 2000
POSTABLE_CHANNELS = ("telegram", "slack", "discord")  # a later message can be posted into these


class JobRefused(Exception):
    """A job that cannot be made or changed; the message is the reason, for the model or the person."""


@dataclass(frozen=True, slots=True)
class Asker:
    """Who asks, from where: `who` is the person (`InboundEvent.who`), None for the operator (the agent
    file, the HTTP API, the CLI), who may change any job."""

    who: str | None
    user_id: str | None
    conversation_key: str

    @property
    def operator(self) -> bool:
        return self.who is None


def when_of(job: JobRecord) -> When:
    return When.from_json(json.dumps(job.schedule))


def schedule_of(when: When) -> dict[str, Any]:
    return dict(json.loads(when.to_json()))


def local_time(t: float | None, tz: str) -> str:
    if t is None:
        return "none"
    return datetime.fromtimestamp(t, zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def describe(job: JobRecord) -> str:
    """One line a person (or the model) reads: id, kind, schedule, next fire in the job's zone."""
    state = "" if job.status == "active" else f" [{job.status}]"
    said = job.text if len(job.text) <= 60 else job.text[:57] + "..."
    return (
        f"{job.id}: {job.kind} {said!r}, {when_of(job).describe()}, "
        f"next {local_time(job.next_fire_at, job.timezone)}{state}"
    )


class JobBook:
    def __init__(self, name: str, store: Store, spec: Callable[[], AgentSpec], clock: Clock):
        self._name, self._store, self._spec, self.clock = name, store, spec, clock
        self.on_change: Callable[[], None] = lambda: None  # the scheduler wakes to look again
        # the scheduler runs a job now (without shifting its schedule); None: no scheduler here
        self.run_now: Callable[[JobRecord, Asker], None] | None = None

    # -- reading ---------------------------------------------------------------------------------

    async def of_conversation(self, conversation_key: str) -> list[JobRecord]:
        return await self._store.read(Jobs(conversation_key))

    async def prompt_section(self, conversation_key: str) -> str:
        """What the model sees of this conversation's jobs, one line each (so "make it weekly instead"
        names the job just made): nothing when there are none."""
        jobs = await self.of_conversation(conversation_key)
        if not jobs:
            return ""
        lines = "\n".join(f"- {describe(j)}" for j in jobs)
        return f"This conversation's scheduled jobs (change one with update_job and its id):\n{lines}"

    async def get(self, job_id: str, asker: Asker) -> JobRecord:
        """The job, if the asker may change it (theirs, or they are the operator)."""
        job = await self._store.read(JobById(job_id.strip()))
        if job is None or job.status in ("cancelled", "done"):
            raise JobRefused(f"there is no job {job_id!r} (cancelled or done ones are gone)")
        if not asker.operator and job.owner != asker.who:
            raise JobRefused(
                f"job {job.id} is not yours: only the person who made it (or an operator) may change it"
            )
        return job

    # -- changing --------------------------------------------------------------------------------

    async def create(
        self,
        asker: Asker,
        when: str | Mapping[str, Any],
        text: str,
        kind: str = "reminder",
        timezone: str | None = None,
    ) -> JobRecord:
        schedule = self._spec().schedule
        if schedule is None:
            raise JobRefused("this agent has no schedule: block, so it cannot make jobs")
        kind, text = _kind(kind), _text(text, kind)
        self._deliverable(asker.conversation_key)
        tz = timezone or schedule.timezone
        parsed = self._parse(when, tz, asker)
        if not asker.operator:
            owned = await self._store.read(Jobs(owner=asker.who))
            if len(owned) >= schedule.max_jobs_per_person:
                raise JobRefused(
                    f"you have {len(owned)} jobs here, the most this agent keeps per person "
                    f"({schedule.max_jobs_per_person}): cancel one first"
                )
        now = self.clock.time()
        job = JobRecord(
            id=new_job_id(),
            name=None,
            conversation_key=asker.conversation_key,
            deliver_to=asker.conversation_key,
            owner=asker.who,
            user_id=asker.user_id,
            kind=kind,
            text=text,
            schedule=schedule_of(parsed),
            timezone=tz,
            status="active",
            next_fire_at=parsed.next_after(now),
            failures=0,
            created_at=now,
            updated_at=now,
        )
        await self._store.write(InsertJob(job), self._audit("create", job, asker))
        self.on_change()
        return job

    async def update(
        self,
        asker: Asker,
        job_id: str,
        *,
        when: str | Mapping[str, Any] | None = None,
        text: str | None = None,
        kind: str | None = None,
        timezone: str | None = None,
    ) -> JobRecord:
        job = await self.get(job_id, asker)
        changes: dict[str, Any] = {}
        if kind is not None:
            changes["kind"] = _kind(kind)
        if text is not None or kind is not None:
            changes["text"] = _text(text if text is not None else job.text, changes.get("kind", job.kind))
        now = self.clock.time()
        if when is not None or timezone is not None:
            tz = timezone or job.timezone
            parsed = self._parse(when if when is not None else when_of(job).spec(), tz, asker)
            changes |= {"schedule": schedule_of(parsed), "timezone": tz}
            if job.status == "active":
                changes["next_fire_at"] = parsed.next_after(now)
        if not changes:
            raise JobRefused("nothing to change: give when, what, kind or timezone")
        changed = replace(job, updated_at=now, **changes)
        await self._store.write(UpdateJob(changed), self._audit("update", changed, asker, sorted(changes)))
        self.on_change()
        return changed

    async def set_status(self, asker: Asker, job_id: str, status: str) -> JobRecord:
        """cancel (status cancelled), pause (paused) or resume (active, from now on)."""
        job = await self.get(job_id, asker)
        if job.status == status:
            raise JobRefused(f"job {job.id} is {status} already")
        next_fire = job.next_fire_at
        if status == "active":
            next_fire = when_of(job).next_after(self.clock.time())
        changed = replace(
            job, status=status, next_fire_at=next_fire, updated_at=self.clock.time(), paused_reason=None
        )
        action = {"cancelled": "cancel", "paused": "pause", "active": "resume"}[status]
        await self._store.write(UpdateJob(changed), self._audit(action, changed, asker))
        self.on_change()
        return changed

    async def fire_now(self, asker: Asker, job_id: str) -> JobRecord:
        job = await self.get(job_id, asker)
        if self.run_now is None:
            raise JobRefused("no scheduler runs here (the daemon runs jobs): it fires at its time")
        self.run_now(job, asker)
        return job

    # -- checks ----------------------------------------------------------------------------------

    def _parse(self, when: str | Mapping[str, Any], tz: str, asker: Asker) -> When:
        schedule = self._spec().schedule
        assert schedule is not None
        # the operator's own jobs are bounded by nothing but their file; the chat's by min_interval
        bound = None if asker.operator else schedule.min_interval
        try:
            return parse_when(when, tz, now=self.clock.time(), min_interval_s=bound)
        except WhenError as e:
            raise JobRefused(str(e)) from None

    def _deliverable(self, conversation_key: str) -> None:
        """A job delivers into the conversation it was made in: refused where nothing can be posted later."""
        channel = conversation_key.partition(":")[0]
        if channel in POSTABLE_CHANNELS:
            return
        webhook = self._spec().channels.webhook
        if channel == "webhook" and webhook is not None and getattr(webhook, "deliver_url", None):
            return
        raise JobRefused(
            f"nothing can be delivered into this conversation later (a {channel} conversation"
            + (", and channels.webhook.deliver_url is not set" if channel == "webhook" else "")
            + "): a job can be made from Telegram, Slack or Discord, or the webhook with a deliver_url"
        )

    def _audit(
        self, action: str, job: JobRecord, asker: Asker, changed: list[str] | None = None
    ) -> AppendAudit:
        data: dict[str, Any] = {"job": job.id, "kind": job.kind, "by": asker.who or "operator"}
        data |= {"schedule": when_of(job).spec(), "timezone": job.timezone, "next_fire_at": job.next_fire_at}
        if changed:
            data["changed"] = changed
        record = AuditRecord("job", action, job.conversation_key, None, data)
        return AppendAudit(self._name, [record], self.clock.time())


def _kind(kind: str) -> str:
    if kind not in ("reminder", "task"):
        raise JobRefused(
            f"kind {kind!r}: reminder (its text is delivered as written) or task (the agent runs the "
            "prompt and delivers its reply)"
        )
    return kind


def _text(text: str, kind: str) -> str:
    text = text.strip()
    if not text:
        raise JobRefused("what to remind of (or the task's prompt) is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise JobRefused(f"the text is {len(text)} characters; at most {MAX_TEXT_CHARS}")
    if kind == "task" and text.startswith("/"):
        raise JobRefused("a task's prompt cannot be a command (it starts with '/')")
    return text


def new_job_id() -> str:
    return "j" + secrets.token_hex(5)  # short (people type it after /jobs cancel), unique among many
