"""The writes of budgets, usage and rate limits (the daemon's own store; agentd/engine/metering.py and
rate_limits.py), declared beside writes.py the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.store.usage_rows import UsageRow
from agentd.store.writes import Write


@dataclass(frozen=True, slots=True)
class SpendKey:
    """A budget's counter: the budget, whom it charges, the period ("2026-12-02", "2026-12"), its limit."""

    budget: str
    subject: str
    period: str
    limit: int  # micro-dollars or tokens, as the budget counts


@dataclass(frozen=True, slots=True)
class ReserveSpend(Write[tuple[int, bool] | None]):
    """Add each amount to its counter unless one has reached its limit: then nothing is added and the
    result is its index, and True the first time that counter refuses (None: all added). Atomic across
    daemons (reservations queue on the rows)."""

    entries: Sequence[tuple[SpendKey, int]]


@dataclass(frozen=True, slots=True)
class AddSpend(Write[None]):
    """Add to counters without a check (a settled call's usage less its reservation, possibly < 0)."""

    entries: Sequence[tuple[SpendKey, int]]


@dataclass(frozen=True, slots=True)
class RecordUsage(Write[None]):
    row: UsageRow  # added to its day's row


@dataclass(frozen=True, slots=True)
class TakeToken(Write[tuple[bool, int]]):
    """Take a token from a bucket of `capacity`, refilled at `per_s` a second, as of `now`: (True, events
    refused since the last taken) or, empty, (False, events refused in a row now, this one included)."""

    scope: str
    subject: str
    capacity: int
    per_s: float
    now: float
