"""A heartbeat's active hours: `08:00-22:00` in the agent's zone (`22:00-06:00` runs over midnight).

    hours = ActiveHours.parse("08:00-22:00")
    hours.contains(t, "Europe/Lisbon")    # is epoch t inside them, in that zone's wall clock
    hours.next_open(t, "Europe/Lisbon")   # t itself when inside, else the next opening

A heartbeat due outside them waits for the next opening instead of firing (the runner asks
`next_open` of the fire `When.next_after` gave). An opening inside an hour the clock skips is the first
valid moment after it, as for every wall-clock time (agentd.schedule.when).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta

from agentd.schedule.when import WhenError, local_epoch, zone

HOURS_PATTERN = r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*-\s*([01]?\d|2[0-4]):([0-5]\d)\s*$"
_RANGE_RE = re.compile(HOURS_PATTERN)


@dataclass(frozen=True)
class ActiveHours:
    start: time
    end: time  # time(0) with `24:00`: the end of the day
    text: str

    @classmethod
    def parse(cls, text: str) -> ActiveHours:
        match = _RANGE_RE.match(text)
        if match is None or (match.group(3) == "24" and match.group(4) != "00"):
            raise WhenError(f"{text!r} is not a range of hours (expected HH:MM-HH:MM, e.g. 08:00-22:00)")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        start, end = time(h1, m1), time(0 if h2 == 24 else h2, m2)
        if start == end and h2 != 24:
            raise WhenError(f"{text!r} is an empty range of hours (leave active_hours out for all day)")
        return cls(start, end, text.strip())

    def contains(self, t: float, tz: str) -> bool:
        wall = datetime.fromtimestamp(t, zone(tz)).time()
        if self.start < self.end:
            return self.start <= wall < self.end
        return wall >= self.start or wall < self.end  # over midnight (or 00:00-24:00: all day)

    def next_open(self, t: float, tz: str) -> float:
        """`t` when it is inside the hours, else the first moment after `t` they open."""
        if self.contains(t, tz):
            return t
        tzinfo = zone(tz)
        day = datetime.fromtimestamp(t, tzinfo).date()
        for offset in (0, 1):
            opening = local_epoch(datetime.combine(day + timedelta(days=offset), self.start), tzinfo)
            if opening > t:
                return opening
        raise AssertionError("an opening is always within a day")  # pragma: no cover
