"""Sending what fires made (the outbox rows, agentd/store/job_records.py): into the conversation through
the daemon's `Outbox` (the agent's Slack, Telegram or Discord channel), or for the webhook as a signed
POST to its deliver_url (agentd/channels/webhook_delivery.py).

A delivery is marked sent only once the platform acknowledged it (the channel's send returned; the
receiver answered 2xx); a failure is retried with backoff and reported (an audit event each time, the
metric, and `/jobs`), and after MAX_ATTEMPTS it is marked failed — never sent. Each send is under the
delivery's lease, so of several daemons one sends it. The one window for a duplicate is a crash
between the platform's acknowledgement and our record of it: the delivery is then still pending, and
sent again at the next start (a webhook receiver can drop it by its `webhook-id`, the delivery's id).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import httpx

from agentd.channels.webhook_delivery import DeliveryFailed, job_message, send_signed
from agentd.clock import Clock
from agentd.daemon.job_metrics import JobMetrics
from agentd.engine.agent import Agent
from agentd.engine.outbox import Outbox
from agentd.store.base import Leases
from agentd.store.job_queries import DueDeliveries, JobDeliveries
from agentd.store.job_records import DeliveryRecord
from agentd.store.job_writes import DeliveryAttempt
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 8
FIRST_RETRY_S = 5.0
MAX_RETRY_S = 3600.0
BATCH = 100
SENDERS = 8  # deliveries in flight at once per agent
PENDING_COUNTED = 10_000  # the gauge of waiting deliveries counts up to this many


def retry_delay(attempts: int) -> float:
    """5 s, 20 s, 80 s, ... up to an hour, after the `attempts`-th failure."""
    return float(min(MAX_RETRY_S, FIRST_RETRY_S * 4 ** (attempts - 1)))


class Deliverer:
    def __init__(
        self,
        agent: Agent,
        leases: Leases,
        daemon_id: str,
        lease_s: float,
        clock: Clock,
        metrics: JobMetrics,
        outbox: Outbox,
        http: httpx.AsyncClient,
    ):
        self.agent, self._leases, self._daemon_id, self._lease_s = agent, leases, daemon_id, lease_s
        self.clock, self.metrics, self.outbox, self._http = clock, metrics, outbox, http
        self.wake: Any = lambda: None  # the scheduler's: a new delivery is waiting
        self._slots = asyncio.Semaphore(SENDERS)

    async def deliver_due(self) -> None:
        store, tried = self.agent.state.store, False
        while True:
            due = await store.read(DueDeliveries(self.clock.time(), BATCH))
            if not due:
                break
            tried = True
            await asyncio.gather(*(self._deliver_held(d) for d in due))
            if len(due) < BATCH:
                break
        if tried:  # what waits now, read off the index of pending deliveries (not every row)
            waiting = await store.read(DueDeliveries(math.inf, PENDING_COUNTED))
            self.metrics.pending.labels(self.agent.name).set(len(waiting))

    async def _deliver_held(self, delivery: DeliveryRecord) -> None:
        async with self._slots:
            name = f"delivery:{self.agent.name}:{delivery.id}"
            token = await self._leases.acquire(name, self._daemon_id, self._lease_s)
            if token is None:
                return
            try:
                if await self._still_pending(delivery):
                    await self._deliver(delivery)
            finally:
                await self._leases.release(name, self._daemon_id, token)

    async def _still_pending(self, delivery: DeliveryRecord) -> bool:
        """Another daemon may have sent it between our read and our lease."""
        found = await self.agent.state.store.read(JobDeliveries(delivery.job_id, "pending", limit=1000))
        return any(d.id == delivery.id and d.attempts == delivery.attempts for d in found)

    async def _deliver(self, delivery: DeliveryRecord) -> None:
        attempts = delivery.attempts + 1
        try:
            await self._send(delivery)
        except Exception as e:
            await self._failed(delivery, attempts, e)
            return
        now = self.clock.time()
        data = {"job": delivery.job_id, "delivery": delivery.id, "attempts": attempts, "by": "scheduler"}
        await self.agent.state.store.write(
            DeliveryAttempt(delivery.id, "sent", attempts, now, now, None),
            AppendAudit(
                self.agent.name, [AuditRecord("job", "delivered", delivery.conversation_key, None, data)], now
            ),
        )
        self.metrics.delivered(self.agent.name, "sent")

    async def _send(self, delivery: DeliveryRecord) -> None:
        channel, _, where = delivery.conversation_key.partition(":")
        if channel == "webhook":
            webhook = self.agent.spec.channels.webhook
            url = where if where.startswith(("http://", "https://")) else webhook and webhook.deliver_url
            secret = webhook.signing_secret if webhook is not None else None
            if not url or not secret:
                raise DeliveryFailed(
                    "channels.webhook needs deliver_url and signing_secret", status=None, retryable=False
                )
            message = job_message(
                agent=self.agent.name,
                job_id=delivery.job_id,
                conversation=delivery.conversation_key,
                text=delivery.text,
                fired_at=delivery.fire_at,
                kind="job",
            )
            await send_signed(
                self._http, url, secret, delivery_id=delivery.id, payload=message, now=self.clock.time()
            )
            return
        if not await self.outbox.post(self.agent.name, delivery.conversation_key, delivery.text):
            raise ConnectionError(f"the {channel} channel could not post into {delivery.conversation_key}")

    async def _failed(self, delivery: DeliveryRecord, attempts: int, error: Exception) -> None:
        now = self.clock.time()
        final = attempts >= MAX_ATTEMPTS or (isinstance(error, DeliveryFailed) and not error.retryable)
        asked = error.retry_after if isinstance(error, DeliveryFailed) and error.retry_after else 0.0
        retry_at = now + max(retry_delay(attempts), asked)  # the receiver's Retry-After, if longer
        reason = str(error) or type(error).__name__
        log.warning(
            "agent %s: delivery %s of job %s failed (attempt %d%s): %s",
            self.agent.name,
            delivery.id,
            delivery.job_id,
            attempts,
            ", giving up" if final else "",
            reason,
        )
        data = {"job": delivery.job_id, "delivery": delivery.id, "attempts": attempts, "error": reason}
        data |= {"final": final, "retry_at": None if final else retry_at, "by": "scheduler"}
        await self.agent.state.store.write(
            DeliveryAttempt(delivery.id, "failed" if final else "pending", attempts, retry_at, None, reason),
            AppendAudit(
                self.agent.name,
                [AuditRecord("job", "delivery_failed", delivery.conversation_key, None, data)],
                now,
            ),
        )
        self.metrics.delivered(self.agent.name, "failed" if final else "retry")
