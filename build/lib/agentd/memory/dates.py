"""Dates a message names ("on 3 May 2023", "in June 2023", "in June", "2023-05-03", "in 2023"),
as periods recall can prefer: what was said then ranks above what was said at other times.

A day stands for the week before it and the day after (people ask "what happened on the 9th?"
about what they said in the days around it, and "the week before 9 June" about the week before);
a month or a year for itself; a month without a year for that month of every year. All UTC.
Relative dates ("last Friday") are not read: they need the asker's calendar, not the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"((?:19|20)\d\d)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_PATTERNS = [  # (regex, which groups are day, month, year)
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I), (1, 2, 3)),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I), (2, 1, 3)),
    (re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b"), (3, 2, 1)),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I), (0, 1, 2)),
    (re.compile(rf"\b(?:in|during|since|of)\s+{_MONTH}(?!\w)", re.I), (0, 1, 0)),
    (re.compile(rf"\b(?:in|during|since|of)\s+{_YEAR}\b", re.I), (0, 0, 1)),
]
DAY_BEFORE = timedelta(days=8)
DAY_AFTER = timedelta(days=2)


@dataclass(frozen=True, slots=True)
class Period:
    """[start, end) in epoch seconds; or, with `month_of_year`, that month of any year."""

    start: float = 0.0
    end: float = 0.0
    month_of_year: int | None = None


def mentioned_periods(text: str) -> list[Period]:
    """The periods a text names, each read once (a full date is not read again as its month)."""
    periods: list[Period] = []
    taken: list[tuple[int, int]] = []
    for pattern, (day_at, month_at, year_at) in _PATTERNS:
        for match in pattern.finditer(text):
            if any(a < match.end() and match.start() < b for a, b in taken):
                continue
            day = int(match.group(day_at)) if day_at else None
            month = _month(match.group(month_at)) if month_at else None
            year = int(match.group(year_at)) if year_at else None
            period = _period(day, month, year)
            taken.append(match.span())  # read once, even when it is no date ("31 February")
            if period is not None:
                periods.append(period)
    return periods


def _month(word: str) -> int | None:
    return MONTHS.get(
        word.lower().rstrip("."), int(word) if word.isdigit() and 1 <= int(word) <= 12 else None
    )


def _period(day: int | None, month: int | None, year: int | None) -> Period | None:
    try:
        if year is None:
            return Period(month_of_year=month) if month else None
        if month is None:
            return Period(_ts(datetime(year, 1, 1, tzinfo=UTC)), _ts(datetime(year + 1, 1, 1, tzinfo=UTC)))
        if day is None:
            start = datetime(year, month, 1, tzinfo=UTC)
            end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
            return Period(_ts(start), _ts(end))
        at = datetime(year, month, day, tzinfo=UTC)
    except ValueError:  # "31 February": not a date
        return None
    return Period(_ts(at - DAY_BEFORE), _ts(at + DAY_AFTER))


def _ts(value: datetime) -> float:
    return value.timestamp()


def within(created: Any, periods: list[Period]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per creation time: whether it falls in any of the periods."""
    times = np.asarray(created, dtype=np.float64)
    inside = np.zeros(times.shape, dtype=np.bool_)
    months = None
    for period in periods:
        if period.month_of_year is not None:
            if months is None:
                months = times.astype("datetime64[s]").astype("datetime64[M]").astype(np.int64) % 12 + 1
            inside |= months == period.month_of_year
        else:
            inside |= (times >= period.start) & (times < period.end)
    return inside
