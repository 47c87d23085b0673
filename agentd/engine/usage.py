"""Usage anyone can read: the day rows the meter counts (agentd.engine.metering), summed for `/usage`,
`GET /usage`, `agentd usage` and the /ui/usage page, and the budgets' counters near their limits.

Usage days are UTC days. Counts a provider did not report are estimates: every sum says how many of
its calls were estimated (`estimated_calls`) and `estimated` is true when any was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from agentd.config.budgets import MICROS
from agentd.engine.metering import Meter, Served, budget_id, period_of, shown_limit
from agentd.store.budget_queries import SpendOf, UsageRows
from agentd.store.usage_rows import UsageRow

GROUPS = {
    "day": "day",
    "agent": "agent",
    "person": "who",
    "channel": "channel",
    "model": "model",
    "trigger": "trigger",
}
NEAR = 0.8  # a counter at 80% of its limit or more is "near"
TOP = 10


def utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def totals(rows: Iterable[UsageRow]) -> dict[str, Any]:
    calls = estimated = tokens_in = tokens_out = micros = 0
    for r in rows:
        calls += r.calls
        estimated += r.estimated_calls
        tokens_in += r.input_tokens
        tokens_out += r.output_tokens
        micros += r.cost_micros
    return {
        "calls": calls,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cost": round(micros / MICROS, 6),
        "estimated_calls": estimated,
        "estimated": estimated > 0,
    }


def grouped(rows: Sequence[UsageRow], by: str) -> list[dict[str, Any]]:
    """Totals per value of `by` (a GROUPS name), in the value's order (days ascending)."""
    column = GROUPS[by]
    groups: dict[str, list[UsageRow]] = defaultdict(list)
    for r in rows:
        groups[getattr(r, column)].append(r)
    return [{by: key, **totals(groups[key])} for key in sorted(groups)]


def top(rows: Sequence[UsageRow], by: str, n: int = TOP) -> list[dict[str, Any]]:
    """The `n` biggest spenders by `by` (person, agent), by cost then tokens; nobody's work is left out."""
    found = [g for g in grouped(rows, by) if g[by]]
    found.sort(key=lambda g: (-g["cost"], -(g["input_tokens"] + g["output_tokens"]), g[by]))
    return found[:n]


async def report(
    meter: Meter,
    since: date,
    until: date,
    *,
    agent: str | None = None,
    person: str | None = None,
    channel: str | None = None,
    group_by: str = "day",
) -> dict[str, Any]:
    """What GET /usage answers (the caller checked the arguments)."""
    rows = await meter.store.read(UsageRows(since.isoformat(), until.isoformat(), agent, person, channel))
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "group_by": group_by,
        "total": totals(rows),
        "groups": grouped(rows, group_by),
        "top_people": top(rows, "person"),
        "top_agents": top(rows, "agent"),
        "near_limit": await near_limits(meter),
    }


async def near_limits(meter: Meter, ratio: float = NEAR) -> list[dict[str, Any]]:
    """The counters of the current periods at `ratio` of their limit or past it, fullest first. Budgets
    per person are listed for the people who spent in the period (their usage rows name them)."""
    now = meter.clock.time()
    month_start = datetime.fromtimestamp(now, UTC).date().replace(day=1) - timedelta(days=1)
    rows = await meter.store.read(UsageRows(month_start.isoformat(), utc_day(now)))
    subjects = {
        "person": {r.who for r in rows if r.who},
        "agent": {r.agent for r in rows},
        "channel": {r.channel for r in rows if r.channel},
        "job": set(),  # (a job's counters: read when the scheduler names its jobs here)
    }
    keys, specs = [], []
    for spec in meter.budgets:
        period, resets_at = period_of(spec, now)
        fixed = {"agent": spec.agent, "channel": spec.channel, "job": spec.job}.get(spec.per)
        for subject in sorted({fixed} if fixed else subjects[spec.per]):
            keys.append((budget_id(spec), subject, period))
            specs.append((spec, subject, period, resets_at))
    used = await meter.store.read(SpendOf(keys)) if keys else []
    out: list[dict[str, Any]] = []
    for (spec, subject, period, resets_at), spent in zip(specs, used, strict=True):
        _, limit, _ = spec.amount()
        if limit and spent / limit >= ratio:
            out.append(
                {
                    "per": spec.per,
                    "subject": subject,
                    "limit": shown_limit(spec),
                    "period": period,
                    "used": round(spent / MICROS, 6) if spec.amount()[0] == "money" else spent,
                    "ratio": round(spent / limit, 3),
                    "resets_at": datetime.fromtimestamp(resets_at, UTC).isoformat().replace("+00:00", "Z"),
                }
            )
    out.sort(key=lambda item: -item["ratio"])
    return out


def money(cost: float) -> str:
    return f"${cost:.4f}" if cost < 0.01 and cost else f"${cost:.2f}"


def said(t: dict[str, Any]) -> str:
    """A line of totals: '1,234 tokens (1,000 in, 234 out), $0.12', '(estimated)' when any count was."""
    tokens = t["input_tokens"] + t["output_tokens"]
    line = f"{tokens:,} tokens ({t['input_tokens']:,} in, {t['output_tokens']:,} out), {money(t['cost'])}"
    return line + (" (estimated)" if t["estimated"] else "")


async def own_usage(meter: Meter, agent: str, served: Served) -> str:
    """What `/usage` says: the person's own usage today and this month (UTC days), with every agent,
    and where they stand on each budget of theirs."""
    assert served.who is not None
    today = datetime.fromtimestamp(meter.clock.time(), UTC).date()
    rows = await meter.store.read(
        UsageRows(today.replace(day=1).isoformat(), today.isoformat(), who=served.who)
    )
    day = totals(r for r in rows if r.day == today.isoformat())
    lines = [f"Your usage today: {said(day)}.", f"This month: {said(totals(rows))}."]
    theirs = [c for c in meter.charges(agent, served, meter.clock.time()) if c.spec.per == "person"]
    used = await meter.store.read(SpendOf([(c.key.budget, c.key.subject, c.key.period) for c in theirs]))
    for charge, spent in zip(theirs, used, strict=True):
        shown = money(spent / MICROS) if charge.money else f"{spent:,} tokens"
        which = "today" if charge.key.period.count("-") == 2 else "this month"
        lines.append(f"Your limit {which}: {shown} of {shown_limit(charge.spec)} ({charge.spec.timezone}).")
    return "\n".join(lines)
