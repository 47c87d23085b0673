"""The reads of budgets and usage (the daemon's own store), declared beside queries.py the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.store.queries import Query
from agentd.store.usage_rows import UsageRow


@dataclass(frozen=True, slots=True)
class SpendOf(Query[list[int]]):
    """Each counter's spend so far (0 when it has none), in order; (budget, subject, period) each."""

    keys: Sequence[tuple[str, str, str]]


@dataclass(frozen=True, slots=True)
class UsageRows(Query[list[UsageRow]]):
    """The usage rows of the days from `since` to `until` (YYYY-MM-DD,
    both included), of one agent, person or channel when given."""

    since: str
    until: str
    agent: str | None = None
    who: str | None = None
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class PersonUsage(Query[list[UsageRow]]):
    """Every usage row of a person: the id alone, or as any channel's account."""

    user_id: str
