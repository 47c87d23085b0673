"""`GET /usage`: tokens and spend per day (or agent, person, channel, model, trigger), the top people and
agents, and the budgets' counters near their limits (agentd/engine/usage.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from fastapi import FastAPI, Query
from fastapi.params import Depends

from agentd.engine.usage import GROUPS, report
from agentd.http.bodies import TIME_SCHEMA, epoch_seconds
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes

DEFAULT_DAYS = 30  # without `since`: the last 30 days, today included
DAY_SCHEMA: dict[str, Any] = {
    "anyOf": [*TIME_SCHEMA["anyOf"], {"type": "string", "format": "date"}, {"type": "string", "maxLength": 0}]
}


def _day(name: str, value: str | None) -> date | None:
    if value is None or value == "":
        return None
    try:
        return datetime.fromtimestamp(epoch_seconds(value, numeric_text=True), UTC).date()
    except (ValueError, OverflowError) as e:
        raise ApiError(400, f"{name}: {e}") from None


def _days_before(day: date, days: int) -> date:
    """`days` before `day`, or the first day there is (until=0001-01-05 has no 30 days before it)."""
    return day - timedelta(days=days) if (day - date.min).days >= days else date.min


def add_usage_routes(app: FastAPI, directory: AgentDirectory, protected: list[Depends]) -> None:
    get = routes(app, "GET", protected)

    @get("/usage", 400, 503, tag="daemon")
    async def usage(
        agent: str | None = Query(default=None, description="one agent's usage"),
        person: str | None = Query(
            default=None, description="one person's: their person id, or an account <channel>:<user id>"
        ),
        channel: str | None = Query(default=None, description="one channel's (webhook, telegram, ...)"),
        since: str | None = Query(
            default=None,
            json_schema_extra=DAY_SCHEMA,
            description=f"from this UTC day (a date, or {TIME_SCHEMA['description']}); "
            f"empty: {DEFAULT_DAYS - 1} days before `until`",
        ),
        until: str | None = Query(
            default=None, json_schema_extra=DAY_SCHEMA, description="to this UTC day, included; empty: today"
        ),
        group_by: str = Query(default="day", json_schema_extra={"enum": list(GROUPS)}),
    ) -> dict[str, Any]:
        """Tokens, calls and cost (dollars at the configured prices) in the span, grouped; `estimated`
        marks sums holding counts a provider did not report. `near_limit`: budgets' counters of the
        current period at 80% of their limit or more."""
        meter = directory.usage_meter()
        if meter is None:
            raise ApiError(503, "the daemon is not counting usage yet (starting)")
        if group_by not in GROUPS:
            raise ApiError(400, f"group_by: expected one of {', '.join(GROUPS)}, got {group_by!r}")
        last = _day("until", until) or datetime.fromtimestamp(meter.clock.time(), UTC).date()
        first = _day("since", since) or _days_before(last, DEFAULT_DAYS - 1)
        # (since after until is an empty span: nothing in it, not an error of the request's form)
        return await report(
            meter,
            first,
            last,
            agent=agent or None,
            person=person or None,
            channel=channel or None,
            group_by=group_by,
        )
