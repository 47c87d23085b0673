"""`rate_limits:`: how fast a person, channel or agent may send, as token buckets in the daemon's store.

Each limit is a bucket per subject holding `limit` tokens, refilled evenly over the unit; an event
takes one before it is queued (agentd.store.writes.TakeToken: one statement, so the daemons sharing
a PostgreSQL database share each bucket; each refills it by its own clock, so the error is the
daemons' clock difference times the rate). An event finding the bucket empty is not queued: it is
dropped, and the person is told to slow down once per streak — the first refused event of a streak
is answered and audited, the rest are only counted (in the bucket's row: across daemons and restarts),
and the count is audited when the streak ends (the next event let through): one audit row per streak,
never one per message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.config.budgets import RateLimitSpec
from agentd.events import InboundEvent
from agentd.store.base import Store
from agentd.store.budget_writes import TakeToken
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit


@dataclass(frozen=True, slots=True)
class Limited:
    """An event over a limit: `reply` is said to the person ("" once they were told this streak)."""

    reply: str
    audit: AuditRecord | None  # the streak's first refusal, or None


def _scope(spec: RateLimitSpec) -> str:
    return "|".join((spec.per, spec.channel or "", spec.agent or "", spec.limit.replace(" ", "")))


def _subject(spec: RateLimitSpec, agent: str, event: InboundEvent) -> str | None:
    if spec.channel is not None and spec.channel != event.channel:
        return None
    if spec.agent is not None and spec.agent != agent:
        return None
    return {"person": event.who, "channel": event.channel, "agent": agent}[spec.per]


def _data(spec: RateLimitSpec, subject: str) -> dict[str, object]:
    """A person's bucket names them as `user` (what an erasure of theirs erases); others as `subject`."""
    return {"per": spec.per, "limit": spec.limit, "user" if spec.per == "person" else "subject": subject}


class RateLimiter:
    def __init__(
        self,
        store: Store,
        limits: Sequence[RateLimitSpec],
        clock: Clock = SYSTEM_CLOCK,
        on_limited: Callable[[str, str], None] | None = None,
    ):
        self.store, self.limits, self.clock = store, list(limits), clock
        self._on_limited = on_limited  # (agent, per): the metric

    async def admit(self, agent: str, event: InboundEvent) -> tuple[Limited | None, list[AuditRecord]]:
        """(None when the event may go on, else how it is refused; the audit rows to write now)."""
        now = self.clock.time()
        ended: list[AuditRecord] = []
        for spec in self.limits:
            subject = _subject(spec, agent, event)
            if subject is None:
                continue
            count, per_s = spec.rate()
            [(took, streak)] = await self.store.write(
                TakeToken(_scope(spec), subject, count, count / per_s, now)
            )
            if not took:
                if self._on_limited is not None:
                    self._on_limited(agent, spec.per)
                if streak > 1:  # told already (by this daemon or another)
                    return Limited("", None), ended
                reply = (
                    f"You are sending messages faster than I can take them (at most {spec.limit.strip()}"
                    f"{'' if spec.per == 'person' else ' in this ' + spec.per}); please slow down. "
                    "Messages sent until then are not answered."
                )
                told = AuditRecord(
                    "rate_limit", "limited", event.conversation_key, None, _data(spec, subject)
                )
                return Limited(reply, told), ended
            if streak > 0:
                data = {**_data(spec, subject), "refused": streak}
                ended.append(AuditRecord("rate_limit", "streak_ended", event.conversation_key, None, data))
        return None, ended


async def audit_rows(store: Store, agent: str, records: list[AuditRecord], now: float) -> None:
    if records:
        await store.write(AppendAudit(agent, records, now))
