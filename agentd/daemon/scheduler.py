"""The scheduler of one agent: wakes for the next due fire (or delivery), never by scanning every job.

Each wait is `clock.sleep_until(the earliest next fire)` — one read of the index on next-fire time —
cut short when a job is made or changed here (`JobBook.on_change`). On a store other daemons share
it also looks again every SHARED_POLL_S, since a job made through another daemon wakes only that one.

Each due job is fired under its lease (`job:<agent>:<id>`, the named leases the bot connections use):
on PostgreSQL the daemons race for it and one wins; a daemon killed mid-fire stops renewing, and once
its lease lapses another takes the job, which is still due (its fire is recorded only with its run).
On SQLite this daemon owns the folder and every lease. A job found overdue by more than MISSED_AFTER_S
(no daemon ran at its time) had missed fires: each is an audit event, and with `missed: run_once`
one catch-up runs if the latest is within `catch_up_within`; with `skip`, none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine
from typing import Any

from agentd.clock import Clock
from agentd.daemon.job_delivery import Deliverer
from agentd.daemon.job_metrics import JobMetrics
from agentd.daemon.job_sync import sync_file_jobs
from agentd.engine.agent import Agent
from agentd.engine.job_fire import fire_job
from agentd.engine.jobs import Asker, when_of
from agentd.store.base import Leases
from agentd.store.job_queries import DueJobs, JobById, NextDeliveryAt, NextFireAt
from agentd.store.job_records import FireRecord, JobRecord
from agentd.store.job_writes import CompleteFire
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, RowMissing

log = logging.getLogger(__name__)
MISSED_AFTER_S = 120.0  # a fire this late was missed (no daemon ran at its time), not just late
SHARED_POLL_S = 30.0
MAX_MISSES_AUDITED = 100  # a job down for months: the first ones, then one event with the count
DUE_BATCH = 200
WORKERS = 16  # fires at once per agent
FAILED_FIRE_PAUSE_S = 2.0
SYNC_RETRY_S = 0.5


class AgentScheduler:
    def __init__(
        self,
        agent: Agent,
        leases: Leases,
        daemon_id: str,
        lease_s: float,
        clock: Clock,
        metrics: JobMetrics,
        deliverer: Deliverer,
    ):
        self.agent, self._leases, self._daemon_id, self._lease_s = agent, leases, daemon_id, lease_s
        self.clock, self.metrics, self.deliverer = clock, metrics, deliverer
        self._wake = asyncio.Event()
        self._resync = True  # the file's jobs are made (or updated) as rows first
        deliverer.wake = self._wake.set
        self._slots = asyncio.Semaphore(WORKERS)
        self._manual: set[asyncio.Task[Any]] = set()
        book = agent.state.jobs
        book.on_change, book.run_now = self._wake.set, self._run_now

    def resync(self) -> None:
        """The agent's file was reloaded: its jobs are brought in line before anything else fires."""
        self._resync = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            if self._resync:
                self._resync = not await self._sync()
                if self._resync:
                    await asyncio.sleep(SYNC_RETRY_S)  # another daemon is syncing the file's jobs
                    continue
            await self.fire_due()
            await self.deliverer.deliver_due()
            await self._sleep()

    async def _sync(self) -> bool:
        """The file's jobs as rows, under the agent's sync lease (daemons starting together would
        each make them otherwise); False when another daemon holds it."""
        name = f"jobs-sync:{self.agent.name}"
        token = await self._leases.acquire(name, self._daemon_id, self._lease_s)
        if token is None:
            return False
        try:
            await sync_file_jobs(self.agent, self.clock)
        finally:
            await self._leases.release(name, self._daemon_id, token)
        return True

    async def _sleep(self) -> None:
        store = self.agent.state.store
        fire, delivery = await store.read_many(NextFireAt(), NextDeliveryAt())
        due = [t for t in (fire, delivery) if t is not None]
        if store.shared:
            due.append(self.clock.time() + SHARED_POLL_S)
        sleeper = asyncio.ensure_future(self._until(min(due) if due else None))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, woken):
                task.cancel()
            await asyncio.gather(sleeper, woken, return_exceptions=True)

    async def _until(self, when: float | None) -> None:
        if when is None:
            await asyncio.Event().wait()  # nothing is ever due: only a change wakes us
        else:
            await self.clock.sleep_until(when)

    async def fire_due(self) -> None:
        """Fire every job due now, WORKERS at a time, in an order of our own (several daemons racing
        for the same due jobs then each mostly win different ones)."""
        while True:
            due = await self.agent.state.store.read(DueJobs(self.clock.time(), DUE_BATCH))
            random.shuffle(due)
            results = await asyncio.gather(*(self._fire_held(job) for job in due))
            if len(due) < DUE_BATCH or not any(results):
                return

    async def _fire_held(self, job: JobRecord) -> bool:
        """Fire the job under its lease; False when another daemon holds it or fired it first."""
        async with self._slots:
            name = f"job:{self.agent.name}:{job.id}"
            token = await self._leases.acquire(name, self._daemon_id, self._lease_s)
            if token is None:
                return False
            renewing = asyncio.ensure_future(self._renew(name, token))
            try:
                current = await self.agent.state.store.read(JobById(job.id))
                if current is None or current.status != "active" or current.next_fire_at != job.next_fire_at:
                    return False  # fired (or changed) by someone else since we read it
                await self._fire(current)
                return True
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
                await self._leases.release(name, self._daemon_id, token)

    async def _renew(self, name: str, token: int) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            if not await self._leases.renew(name, self._daemon_id, token, self._lease_s):
                log.warning("agent %s: lost the lease of %s mid-fire", self.agent.name, name)
                return

    async def _fire(self, job: JobRecord) -> None:
        assert job.next_fire_at is not None
        now, fire_at = self.clock.time(), job.next_fire_at
        trigger = "schedule"
        if now - fire_at > MISSED_AFTER_S:
            if not await self._missed(job, now):
                return
            trigger = "catch_up"
        try:
            outcome = await fire_job(self.agent, job, fire_at, trigger, "scheduler")
        except Exception:  # a store failure, say: nothing of the fire was kept, the job stays due
            log.exception("agent %s: job %s failed to fire; trying again", self.agent.name, job.id)
            self.metrics.fired(self.agent.name, trigger, "crashed", now - fire_at)
            await asyncio.sleep(FAILED_FIRE_PAUSE_S)  # (real time: not a busy loop on a broken store)
            return
        self.metrics.fired(self.agent.name, trigger, outcome.status, now - fire_at)
        if outcome.delivery is not None:
            self._wake.set()

    async def _missed(self, job: JobRecord, now: float) -> bool:
        """Audit each fire missed while no daemon ran; True when one catch-up is to run now, else the
        job is moved on past them here."""
        assert job.next_fire_at is not None
        schedule, when = self.agent.spec.schedule, when_of(job)
        missed: list[float] = []
        t: float | None = job.next_fire_at
        while t is not None and t <= now and len(missed) <= MAX_MISSES_AUDITED:
            missed.append(t)
            t = when.next_after(t)
        policy = schedule.missed if schedule is not None else "skip"
        within = schedule.catch_up_within if schedule is not None else 0.0
        catch_up = policy == "run_once" and missed[-1] >= now - within
        records = [
            AuditRecord("job", "miss", job.deliver_to, None, {"job": job.id, "fire_at": at, "policy": policy})
            for at in missed
        ]
        if t is not None and t <= now:
            records.append(AuditRecord("job", "miss", job.deliver_to, None, {"job": job.id, "more": True}))
        self.metrics.missed(self.agent.name, len(missed))
        ops: list[Any] = [AppendAudit(self.agent.name, records, now)]
        if not catch_up:
            fire = FireRecord(job.id, job.next_fire_at, "schedule", "missed", None, now, now)
            following = when.next_after(now)
            ops.append(
                CompleteFire(fire, following, job.failures, "active" if following else "done", None, now)
            )
        try:
            await self.agent.state.store.write(*ops)
        except RowMissing:
            return False
        return catch_up

    def _run_now(self, job: JobRecord, asker: Asker) -> None:
        """A manual run (run_job_now): fired in the background, the schedule left as it is."""

        async def run() -> None:
            now = self.clock.time()
            outcome = await fire_job(self.agent, job, now, "manual", asker.who or "operator")
            self.metrics.fired(self.agent.name, "manual", outcome.status, 0.0)
            if outcome.delivery is not None:
                self._wake.set()

        task = asyncio.ensure_future(self._guarded(run()))
        self._manual.add(task)
        task.add_done_callback(self._manual.discard)

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:
            log.exception("agent %s: a manual job run failed", self.agent.name)
