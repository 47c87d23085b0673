"""When a job fires: a 5-field cron expression, `every` a fixed interval, or `at` one moment — in an
IANA time zone, and the next fire after any epoch time.

    when = parse_when("cron 0 9 * * 1-5", "Europe/Lisbon", now=clock.time())
    when = parse_when({"every": "30m"}, "UTC", now=clock.time(), min_interval_s=300)
    when = parse_when("at 2026-12-24T18:00", "America/New_York", now=clock.time())
    when.next_after(t)  # epoch seconds of the first fire strictly after t, None when there is none
    when.describe()     # "At 09:00 on Monday through Friday (Europe/Lisbon)"
    When.from_json(when.to_json()) == when

A spec is a string (`cron …`, `every …`, `at …`; without the word, five fields are taken as cron, a
duration as every and an ISO date-time as at) or a mapping with exactly one of `cron`, `every`, `at`.
A bad one raises `WhenError`, whose text is a sentence for whoever wrote it (the model from the
chat, the operator from the agent file).

Time rules (the issue's): wall-clock times are in the job's zone (zoneinfo). On the day the clock
skips an hour, a time inside the gap fires once, at the first valid moment after it (02:30 where
02:00 jumps to 03:00 fires at 03:00); on the day an hour repeats, a time inside it fires once, at its
first occurrence. Cron is evaluated by cronsim, which follows exactly that rule (croniter fires a
fixed-hour job twice on the repeated hour; pyproject says how they were measured). `every` counts
real elapsed seconds from its anchor (the moment it was made), so a run made by hand in between does
not shift it, and neither does DST; a wall-clock time every day is a cron job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

Kind = Literal["cron", "every", "at"]
KINDS: tuple[Kind, ...] = ("cron", "every", "at")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"^\s*(?:\d+\s*[smhdw]\s*)+$", re.IGNORECASE)
_PART_RE = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)
# consecutive cron fires looked at to find its shortest gap (min_interval): two suffice for
# `* 9 * * *`, more for a list like `0,1 9 * * *` that starts past its close pair
_GAPS_CHECKED = 48


class WhenError(ValueError):
    """A schedule that cannot be used; `str()` is the reason, a sentence for the one who wrote it."""


def parse_duration(text: str | int | float) -> float:
    """Seconds in `30m`, `1h30m`, `90s`, `1d`, `2w` (or a bare number of seconds)."""
    if isinstance(text, bool):
        raise WhenError(f"{text!r} is not a duration (expected e.g. 30m, 1h, 1d)")
    if isinstance(text, int | float):
        seconds = float(text)
    elif _DURATION_RE.match(text):
        seconds = float(sum(int(n) * _UNITS[u.lower()] for n, u in _PART_RE.findall(text)))
    else:
        raise WhenError(f"{text!r} is not a duration (expected e.g. 30m, 1h, 1d)")
    if not math.isfinite(seconds) or seconds <= 0:
        raise WhenError(f"{text!r} is not a positive duration (expected e.g. 30m, 1h, 1d)")
    return seconds


def format_duration(seconds: float) -> str:
    """30m for 1800, 1h30m for 5400 — the shortest spelling `parse_duration` reads back."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    left, parts = int(seconds), []
    for unit in ("w", "d", "h", "m", "s"):
        count, left = divmod(left, _UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`; `WhenError` naming it when there is no such zone."""
    try:
        if not name or name != name.strip() or name.startswith(("/", ".")) or ".." in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise WhenError(f"unknown time zone {name!r} (expected an IANA name like Europe/Lisbon)") from None


@dataclass(frozen=True)
class When:
    """A parsed schedule. `expr` is what was written (the cron fields, `30m`, the date-time); `anchor`
    is the epoch the `every` intervals count from, `at` the epoch of the one fire."""

    kind: Kind
    expr: str
    tz: str
    interval_s: float | None = None
    anchor: float | None = None
    at: float | None = None

    def next_after(self, t: float) -> float | None:
        """The first fire strictly after epoch `t`; None when the schedule has no more."""
        if self.kind == "at":
            assert self.at is not None
            return self.at if self.at > t else None
        if self.kind == "every":
            assert self.interval_s is not None and self.anchor is not None
            steps = max(1, math.floor((t - self.anchor) / self.interval_s) + 1)
            fire = self.anchor + steps * self.interval_s
            # float steps: never return t itself (or before it) for a t exactly on a fire
            return fire if fire > t else fire + self.interval_s
        return _cron_next(self.expr, zone(self.tz), t)

    def describe(self) -> str:
        """What a person reads: `At 09:00 on Monday through Friday (Europe/Lisbon)`."""
        if self.kind == "every":
            assert self.interval_s is not None
            return f"every {format_duration(self.interval_s)}"
        if self.kind == "at":
            assert self.at is not None
            local = datetime.fromtimestamp(self.at, zone(self.tz))
            return f"once at {local.strftime('%Y-%m-%d %H:%M')} ({self.tz})"
        try:
            said = CronSim(self.expr, datetime.now(UTC)).explain()
        except Exception:  # explain() is best effort in cronsim; the fields themselves are clear
            said = f"cron {self.expr}"
        return f"{said} ({self.tz})"

    def spec(self) -> str:
        """The spec string `parse_when` reads back (`cron 0 9 * * 1-5`, `every 30m`, `at …`)."""
        return f"{self.kind} {self.expr}"

    def to_json(self) -> str:
        fields = {"kind": self.kind, "expr": self.expr, "tz": self.tz}
        fields |= {k: v for k in ("interval_s", "anchor", "at") if (v := getattr(self, k)) is not None}
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> When:
        data = json.loads(text)
        if data.get("kind") not in KINDS:
            raise WhenError(f"not a stored schedule: {text!r}")
        return cls(
            kind=data["kind"],
            expr=data["expr"],
            tz=data["tz"],
            interval_s=data.get("interval_s"),
            anchor=data.get("anchor"),
            at=data.get("at"),
        )


def parse_when(
    spec: str | Mapping[str, Any], tz: str, *, now: float, min_interval_s: float | None = None
) -> When:
    """`spec` in zone `tz` (an IANA name) as a `When`; `now` anchors `every` and refuses a past `at`;
    a recurring schedule firing more often than `min_interval_s` is refused."""
    kind, value = _split(spec)
    tzinfo = zone(tz)
    if kind == "every":
        interval = parse_duration(value)
        _check_interval(f"every {value}", interval, min_interval_s)
        return When("every", format_duration(interval), tz, interval_s=interval, anchor=now)
    if kind == "at":
        at = _parse_at(str(value), tzinfo)
        if at <= now:
            raise WhenError(f"{value} is in the past")
        return When("at", str(value), tz, at=at)
    expr = " ".join(str(value).split())
    if len(expr.split(" ")) != 5:
        raise WhenError(
            f"cron {value!r} does not have 5 fields (minute hour day-of-month month day-of-week, "
            "e.g. 0 9 * * 1-5)"
        )
    try:
        first = _cron_next(expr, tzinfo, now)
    except CronSimError as e:
        raise WhenError(f"cron {expr!r} does not parse: {str(e).lower()}") from None
    if first is None:
        raise WhenError(f"cron {expr!r} never fires")
    if min_interval_s is not None:
        _check_interval(f"cron {expr}", _shortest_gap(expr, tzinfo, first), min_interval_s)
    return When("cron", expr, tz)


def _split(spec: str | Mapping[str, Any]) -> tuple[Kind, Any]:
    if isinstance(spec, Mapping):
        named = [k for k in KINDS if spec.get(k) is not None]
        other = sorted(set(spec) - set(KINDS))
        if other or len(named) != 1:
            raise WhenError(
                f"a schedule needs exactly one of cron, every or at (got {', '.join(map(str, spec))})"
            )
        return named[0], spec[named[0]]
    if not isinstance(spec, str) or not spec.strip():
        raise WhenError("a schedule is a text like 'cron 0 9 * * 1-5', 'every 30m' or 'at 2026-12-24T18:00'")
    word, _, rest = spec.strip().partition(" ")
    if word.lower() in KINDS and rest.strip():
        return word.lower(), rest.strip()  # type: ignore[return-value]
    text = spec.strip()
    if len(text.split()) == 5:
        return "cron", text
    if _DURATION_RE.match(text):
        return "every", text
    if re.match(r"^\d{4}-\d{2}-\d{2}", text):
        return "at", text
    raise WhenError(
        f"{spec!r} is not a schedule: write 'cron 0 9 * * 1-5', 'every 30m' or 'at 2026-12-24T18:00'"
    )


def _check_interval(said: str, seconds: float, min_interval_s: float | None) -> None:
    if min_interval_s is not None and seconds < min_interval_s:
        raise WhenError(
            f"{said} is more often than this agent's min_interval of {format_duration(min_interval_s)}"
        )


def _parse_at(text: str, tzinfo: ZoneInfo) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise WhenError(f"{text!r} is not an ISO date-time (expected e.g. 2026-12-24T18:00)") from None
    if moment.tzinfo is not None:
        return moment.timestamp()  # an offset was given: that instant, whatever the zone
    return local_epoch(moment, tzinfo)


def local_epoch(wall: datetime, tzinfo: ZoneInfo) -> float:
    """The epoch of a wall-clock time in `tzinfo`: the first occurrence of a repeated one, and for
    one the clock skipped, the first valid moment after it (the end of the gap)."""
    first = wall.replace(tzinfo=tzinfo, fold=0)
    if first.astimezone(UTC).astimezone(tzinfo).replace(tzinfo=None) == wall:
        return first.timestamp()
    # in a gap: fold=1 reads it with the offset after the jump (earlier), fold=0 with the one before
    # (later); the jump is the first second in between whose wall time is past `wall`
    low, high = int(wall.replace(tzinfo=tzinfo, fold=1).timestamp()), math.ceil(first.timestamp())
    while low < high:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, tzinfo).replace(tzinfo=None) > wall:
            high = mid
        else:
            low = mid + 1
    return float(low)


def _cron_next(expr: str, tzinfo: ZoneInfo, t: float) -> float | None:
    start = datetime.fromtimestamp(t, tzinfo)
    try:
        return next(CronSim(expr, start)).timestamp()
    except StopIteration:
        return None


def _shortest_gap(expr: str, tzinfo: ZoneInfo, first: float) -> float:
    fires = CronSim(expr, datetime.fromtimestamp(first - 1e-3, tzinfo))
    previous, shortest = None, math.inf
    for _ in range(_GAPS_CHECKED):
        fire = next(fires, None)
        if fire is None:
            break
        if previous is not None:
            shortest = min(shortest, (fire - previous).total_seconds())
        previous = fire
    return shortest
