"""Claiming a conversation across daemons: a ticket, a wait in arrival order, a lease kept alive.

`ClaimQueue.claim` takes a ticket in one round trip that also tries for the lease and, when it is
granted, reads the thread mark and memories version under it (agentd_claim, claim_sql.py), and the
messages the caller's cached copy of the thread misses when it said where that copy stands and they
are at most TAIL_CAP. While
not granted it waits for a release to be notified (wakeups.py), for the holder's lease to run out
(a killed holder), or for its poll, then tries again with the same ticket. Held, it sets
`current_fence`, so every write batch of the agent made in this context checks the lease first; the
heartbeat renews every ticket this process holds or waits with, in one statement, a third of the way
through a lease, so a model call may take longer than a lease.

Leaving gives the ticket back without waiting for the database: what the claim covered is committed
(or refused) already, so the reply need not wait for the release's round trip. The release is on its
way at once (others waiting are notified when it commits); a claim of the same conversation by this
process that comes before it has run (the next message of a burst) gives that ticket back itself, in
its own round trip, so it never queues behind its own last ticket nor waits for the release. A release
that fails (the database restarting, unreachable) is tried again, with backoff, until the database
answers or the ticket would have lapsed anyway: giving a ticket back twice is harmless, while not giving
it back blocks the conversation on every other daemon for the rest of the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from agentd.backoff import backoff_delays
from agentd.errors import StoreError
from agentd.store.claims import Claim, Fence, KnownThread, ThreadMark, ThreadTail, current_fence
from agentd.store.postgres.claim_fence_sql import RELEASE, RENEW
from agentd.store.postgres.claim_sql import CLAIM, queue_digest
from agentd.store.postgres.executor import PgExecutor
from agentd.store.postgres.wakeups import Wakeups, stopped
from agentd.store.records import stored_messages

log = logging.getLogger(__name__)
MAX_POLL_S = 1.0  # a waiting claim tries again at least this often (a lost notification costs this)
# The most messages a grant brings for a cached copy that is behind. Random routing over a few daemons
# leaves a copy a turn or a few behind (2 messages a turn); a copy further behind (its daemon served
# none of the conversation's last 32 turns) reads what it misses in pages, as a cold load does,
# rather than make a claim's answer (and the advisory lock held while it is read) long.
TAIL_CAP = 64
RELEASE_RETRY_S = 0.1  # a failed release is tried again after this, doubling up to
MAX_RELEASE_RETRY_S = 2.0


@dataclass(frozen=True, slots=True)
class Grant:
    ticket: int
    granted: bool
    retry_s: float
    claim: Claim


def _grant(row: tuple[Any, ...], known: KnownThread | None) -> Grant:
    ticket, granted, retry_s, thread_id, version, next_seq, layers, memories = row[:8]
    if not granted:
        return Grant(ticket, False, retry_s, Claim())
    mark = ThreadMark(thread_id, version or 0, next_seq, layers or 0)
    seqs, bodies, runs, input_tokens, estimated = row[8:]
    tail = None
    if known is not None and seqs is not None:  # (NULL when not sent: none known, not the same, too long)
        messages = stored_messages(list(zip(seqs, bodies, runs, strict=True)))
        tail = ThreadTail(known.next_seq, tuple(messages), input_tokens, estimated)
    return Grant(ticket, True, 0.0, Claim(ticket, mark, memories, tail))


class ClaimQueue:
    """The claims of one process on one database: asking, waiting, the heartbeat, releasing."""

    def __init__(
        self, executor: PgExecutor, wakeups: Wakeups, daemon: str, lease_s: float, heartbeat_s: float | None
    ):
        self._executor = executor
        self._wakeups = wakeups
        self.daemon = daemon
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else lease_s / 3
        self.poll_s = min(MAX_POLL_S, lease_s / 3)
        self._tickets: set[int] = set()  # held or waiting: renewed by the heartbeat
        self._held: set[int] = set()  # granted, with their claim's block still running
        self._releasing: dict[str, tuple[asyncio.Future[Any], int]] = {}  # by queue digest: (job, ticket)
        self._heartbeat: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._heartbeat = asyncio.create_task(self._renew_forever(), name="agentd-pg-heartbeat")

    async def close(self) -> None:
        """Stop renewing; wait for the releases still on their way (a failing one is not retried
        any more: its ticket lapses by itself)."""
        self._closing = True
        await stopped(self._heartbeat)
        self._heartbeat = None
        if self._releasing:
            await asyncio.wait([future for future, _ in self._releasing.values()])

    @contextlib.asynccontextmanager
    async def claim(
        self, agent_id: int, agent: str, key: str, purpose: str, known: KnownThread | None = None
    ) -> AsyncIterator[Claim]:
        digest = queue_digest(agent_id, purpose, key)
        # this process's last ticket of the conversation, if its release may still be on its way
        releasing = self._releasing.get(digest)
        last = releasing[1] if releasing is not None and not releasing[0].done() else None
        woken = self._wakeups.watch(digest)
        ticket: int | None = None
        try:
            grant = await self._try(agent_id, key, purpose, known, None, last)
            ticket = grant.ticket
            while not grant.granted:
                # until the holder's lease would run out (then it is taken over), a release, or the poll
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(max(grant.retry_s, 0.0) + 0.01, self.poll_s))
                woken.clear()
                grant = await self._try(agent_id, key, purpose, known, ticket)
                ticket = grant.ticket  # (a new one if this one expired while we stalled)
            fence = current_fence.set(Fence(agent, key, grant.ticket))
            self._held.add(grant.ticket)
            try:
                yield grant.claim
            finally:
                self._held.discard(grant.ticket)
                current_fence.reset(fence)
        finally:
            self._wakeups.unwatch(digest)
            if ticket is not None:
                self._release(digest, ticket)

    def holds(self, ticket: int) -> bool:
        """Whether a claim of this process still runs under this ticket. A task started inside a
        claim inherits its fence (context variables are copied) and may write after the claim is
        over: such a write is not under any claim, and is not fenced."""
        return ticket in self._held

    async def _try(
        self,
        agent_id: int,
        key: str,
        purpose: str,
        known: KnownThread | None,
        ticket: int | None,
        release: int | None = None,
    ) -> Grant:
        """One try for the lease (giving `release` back first); the ticket joins the heartbeat as
        soon as the thread has it, and a try cancelled mid-way gives its ticket back once the
        database has answered."""
        at = (known.thread_id, known.version, known.next_seq) if known is not None else (None, None, None)
        args = (agent_id, key, purpose, self.daemon, self.lease_s, ticket, release, *at, TAIL_CAP)

        def job(conn: psycopg.Connection[Any]) -> Grant:
            row = conn.execute(CLAIM, args).fetchone()
            assert row is not None
            return _grant(row, known)

        future = self._executor.submit(job)
        try:
            grant = await asyncio.shield(future)
        except asyncio.CancelledError:
            digest = queue_digest(agent_id, purpose, key)
            future.add_done_callback(lambda done: self._release_orphan(digest, done))
            raise
        if ticket is not None and grant.ticket != ticket:
            self._tickets.discard(ticket)
        self._tickets.add(grant.ticket)
        return grant

    def _release(self, digest: str, ticket: int) -> None:
        """Give the ticket back, without waiting (retried while it fails: `_give_back`)."""
        self._tickets.discard(ticket)
        # (the first try is on its way at once; the task only waits for it, and retries)
        future = asyncio.ensure_future(self._give_back(ticket, self._submit_release(ticket)))
        self._releasing[digest] = (future, ticket)
        future.add_done_callback(lambda done: self._released(digest, done))

    def _submit_release(self, ticket: int) -> asyncio.Future[Any]:
        return self._executor.submit(lambda conn: conn.execute(RELEASE, (ticket, self.daemon)))

    async def _give_back(self, ticket: int, attempt: asyncio.Future[Any]) -> None:
        """agentd_release until the database answers, or until the ticket would have lapsed anyway."""
        loop = asyncio.get_running_loop()
        lapses_at = loop.time() + self.lease_s
        delays = backoff_delays(RELEASE_RETRY_S, MAX_RELEASE_RETRY_S)
        while True:
            try:
                await attempt
                return
            except StoreError as e:
                delay = next(delays)
                if self._closing or loop.time() + delay >= lapses_at:
                    log.warning("giving a conversation lease back failed (it lapses by itself): %s", e)
                    return
                log.info("giving a conversation lease back failed, trying again in %.1fs: %s", delay, e)
                await asyncio.sleep(delay)
                attempt = self._submit_release(ticket)

    def _released(self, digest: str, future: asyncio.Future[Any]) -> None:
        if self._releasing.get(digest, (None,))[0] is future:
            del self._releasing[digest]
        if not future.cancelled() and future.exception() is not None:
            log.warning(
                "giving a conversation lease back failed (it lapses by itself): %s", future.exception()
            )

    def _release_orphan(self, digest: str, future: asyncio.Future[Grant]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._release(digest, future.result().ticket)

    def _renew(self, tickets: list[int]) -> Callable[[psycopg.Connection[Any]], set[int]]:
        return lambda conn: {row[0] for row in conn.execute(RENEW, (self.lease_s, tickets, self.daemon))}

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            tickets = list(self._tickets)
            if not tickets:
                continue
            try:
                alive = await self._executor.call(self._renew(tickets))
            except Exception as e:
                log.warning("renewing %d conversation lease(s) failed: %s", len(tickets), e)
                continue
            lost = {t for t in tickets if t not in alive and t in self._tickets}  # (not released meanwhile)
            self._tickets -= lost
            if lost:
                log.warning(
                    "%d conversation lease(s) lapsed and were taken over; their writes will be refused",
                    len(lost),
                )
