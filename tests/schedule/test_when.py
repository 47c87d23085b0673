"""agentd.schedule.when: cron, every and at in IANA zones, on the days the clock skips or repeats an
hour, and the refusals the model or the operator reads."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agentd.schedule import When, WhenError, parse_duration, parse_when


def epoch(text: str, tz: str) -> float:
    """The epoch of an unambiguous wall-clock time in `tz` (or of an ISO text with an offset)."""
    moment = datetime.fromisoformat(text)
    return (moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(tz))).timestamp()


def fires(when: When, after: float, count: int) -> list[str]:
    """The next `count` fires as local wall times with their offset: 2026-03-29 02:00+01:00."""
    out, t = [], after
    for _ in range(count):
        nxt = when.next_after(t)
        assert nxt is not None and nxt > t
        out.append(datetime.fromtimestamp(nxt, ZoneInfo(when.tz)).isoformat(" ", "minutes"))
        t = nxt
    return out


NOW = epoch("2026-01-01T00:00:00+00:00", "UTC")

# Europe/Lisbon: 2026-03-29 01:00 WET jumps to 02:00 WEST; 2026-10-25 02:00 WEST goes back to 01:00 WET.
# America/New_York: 2026-03-08 02:00 EST jumps to 03:00 EDT; 2026-11-01 02:00 EDT goes back to 01:00 EST.
DST_DAYS = [
    # a daily time inside the skipped hour fires once, at the first valid time after it
    (
        "Europe/Lisbon",
        "30 1 * * *",
        "2026-03-28T12:00",
        ["2026-03-29 02:00+01:00", "2026-03-30 01:30+01:00", "2026-03-31 01:30+01:00"],
    ),
    (
        "America/New_York",
        "30 2 * * *",
        "2026-03-07T12:00",
        ["2026-03-08 03:00-04:00", "2026-03-09 02:30-04:00", "2026-03-10 02:30-04:00"],
    ),
    # a daily time inside the repeated hour fires once, at its first occurrence
    (
        "Europe/Lisbon",
        "30 1 * * *",
        "2026-10-24T12:00",
        ["2026-10-25 01:30+01:00", "2026-10-26 01:30+00:00", "2026-10-27 01:30+00:00"],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        "2026-10-31T12:00",
        ["2026-11-01 01:30-04:00", "2026-11-02 01:30-05:00", "2026-11-03 01:30-05:00"],
    ),
    # a time outside the changed hour keeps its wall time across the change
    (
        "America/New_York",
        "0 9 * * 1-5",
        "2026-03-06T12:00",
        ["2026-03-09 09:00-04:00", "2026-03-10 09:00-04:00", "2026-03-11 09:00-04:00"],
    ),
    # an hourly job: one fire for the skipped hour's slot (02:00 is 03:00), both repeated hours' fires
    (
        "America/New_York",
        "0 * * * *",
        "2026-03-08T00:30",
        ["2026-03-08 01:00-05:00", "2026-03-08 03:00-04:00", "2026-03-08 04:00-04:00"],
    ),
    (
        "Europe/Lisbon",
        "0 * * * *",
        "2026-10-25T00:30",
        ["2026-10-25 01:00+01:00", "2026-10-25 01:00+00:00", "2026-10-25 02:00+00:00"],
    ),
]


@pytest.mark.parametrize(("tz", "cron", "start", "expected"), DST_DAYS)
def test_cron_on_dst_days(tz: str, cron: str, start: str, expected: list[str]) -> None:
    when = parse_when(f"cron {cron}", tz, now=NOW)
    assert fires(when, epoch(start, tz), len(expected)) == expected


@pytest.mark.parametrize(
    ("tz", "at", "expected"),
    [
        ("America/New_York", "2026-03-08T02:30", "2026-03-08 03:00-04:00"),  # skipped: end of the gap
        ("Europe/Lisbon", "2026-03-29T01:30", "2026-03-29 02:00+01:00"),
        ("America/New_York", "2026-11-01T01:30", "2026-11-01 01:30-04:00"),  # repeated: the first
        ("Europe/Lisbon", "2026-10-25T01:30", "2026-10-25 01:30+01:00"),
        ("Europe/Lisbon", "2026-12-24T18:00", "2026-12-24 18:00+00:00"),
        ("Europe/Lisbon", "2026-12-24T18:00-05:00", "2026-12-24 23:00+00:00"),  # an offset wins
    ],
)
def test_at_fires_once(tz: str, at: str, expected: str) -> None:
    when = parse_when(f"at {at}", tz, now=NOW)
    assert fires(when, NOW, 1) == [expected]
    assert when.at is not None and when.next_after(when.at) is None  # once, then no more
    assert when.next_after(when.at - 0.001) == when.at


def test_every_counts_from_its_anchor_not_from_the_last_run() -> None:
    when = parse_when("every 30m", "Europe/Lisbon", now=NOW)
    assert when.interval_s == 1800 and when.anchor == NOW
    assert when.next_after(NOW) == NOW + 1800
    assert when.next_after(NOW + 1800) == NOW + 3600  # exactly on a fire: the one after
    # a run by hand at +10 min does not move the next fire from +30 min
    assert when.next_after(NOW + 600) == NOW + 1800
    # a daemon down for a day resumes on the grid, not a day late
    assert when.next_after(NOW + 86400 + 5) == NOW + 86400 + 1800
    # elapsed time across the spring change: 30 real minutes, whatever the wall clock says
    across = parse_when("every 30m", "Europe/Lisbon", now=epoch("2026-03-29T00:45", "Europe/Lisbon"))
    assert fires(across, across.anchor or 0, 2) == ["2026-03-29 02:15+01:00", "2026-03-29 02:45+01:00"]


@pytest.mark.parametrize(
    ("spec", "kind", "expr"),
    [
        ("cron 0 9 * * 1-5", "cron", "0 9 * * 1-5"),
        ("0   9 * * 1-5", "cron", "0 9 * * 1-5"),
        ({"cron": "0 9 * * 1-5"}, "cron", "0 9 * * 1-5"),
        ("every 90m", "every", "1h30m"),
        ({"every": "1d"}, "every", "1d"),
        ("2h", "every", "2h"),
        ("at 2026-12-24T18:00", "at", "2026-12-24T18:00"),
        ({"at": "2026-12-24T18:00"}, "at", "2026-12-24T18:00"),
    ],
)
def test_spellings(spec: object, kind: str, expr: str) -> None:
    when = parse_when(spec, "UTC", now=NOW)  # type: ignore[arg-type]
    assert (when.kind, when.expr) == (kind, expr)
    again = When.from_json(when.to_json())
    assert again == when
    assert parse_when(when.spec(), "UTC", now=NOW).next_after(NOW) == when.next_after(NOW) or kind == "every"


def test_describe() -> None:
    assert parse_when("cron 0 9 * * 1-5", "Europe/Lisbon", now=NOW).describe() == (
        "At 09:00 on Monday through Friday (Europe/Lisbon)"
    )
    assert parse_when("every 90m", "UTC", now=NOW).describe() == "every 1h30m"
    assert parse_when("at 2026-12-24T18:00", "America/New_York", now=NOW).describe() == (
        "once at 2026-12-24 18:00 (America/New_York)"
    )


@pytest.mark.parametrize(
    ("spec", "tz", "min_interval", "reason"),
    [
        ("every 10s", "UTC", 300, "every 10s is more often than this agent's min_interval of 5m"),
        ("cron * * * * *", "UTC", 300, "cron * * * * * is more often than this agent's min_interval of 5m"),
        (
            "cron 0,1 9 * * *",
            "UTC",
            300,
            "cron 0,1 9 * * * is more often than this agent's min_interval of 5m",
        ),
        ("at 2025-06-01T09:00", "UTC", None, "2025-06-01T09:00 is in the past"),
        (
            "every 30m",
            "Mars/Base",
            None,
            "unknown time zone 'Mars/Base' (expected an IANA name like Europe/Lisbon)",
        ),
        (
            "every 30m",
            "../etc/passwd",
            None,
            "unknown time zone '../etc/passwd' (expected an IANA name like Europe/Lisbon)",
        ),
        ("cron 61 9 * * *", "UTC", None, "cron '61 9 * * *' does not parse: bad minute"),
        (
            "cron 0 9 * *",
            "UTC",
            None,
            "cron '0 9 * *' does not have 5 fields (minute hour day-of-month month "
            "day-of-week, e.g. 0 9 * * 1-5)",
        ),
        ("cron 0 0 30 2 *", "UTC", None, "cron '0 0 30 2 *' does not parse: bad day-of-month"),
        ("every 0m", "UTC", None, "'0m' is not a positive duration (expected e.g. 30m, 1h, 1d)"),
        ("every soon", "UTC", None, "'soon' is not a duration (expected e.g. 30m, 1h, 1d)"),
        ("at tomorrow", "UTC", None, "'tomorrow' is not an ISO date-time (expected e.g. 2026-12-24T18:00)"),
        (
            {"cron": "0 9 * * *", "every": "1h"},
            "UTC",
            None,
            "a schedule needs exactly one of cron, every or at (got cron, every)",
        ),
        (
            "whenever",
            "UTC",
            None,
            "'whenever' is not a schedule: write 'cron 0 9 * * 1-5', 'every 30m' or 'at 2026-12-24T18:00'",
        ),
    ],
)
def test_refusals_read_as_sentences(spec: object, tz: str, min_interval: float | None, reason: str) -> None:
    with pytest.raises(WhenError) as caught:
        parse_when(spec, tz, now=NOW, min_interval_s=min_interval)  # type: ignore[arg-type]
    assert str(caught.value) == reason


def test_min_interval_allows_what_is_not_more_often() -> None:
    assert parse_when("every 5m", "UTC", now=NOW, min_interval_s=300).interval_s == 300
    assert parse_when("cron */5 * * * *", "UTC", now=NOW, min_interval_s=300).kind == "cron"


def test_durations() -> None:
    assert [parse_duration(t) for t in ("30m", "1h", "1d", "1h30m", "2w", "45s", 90)] == [
        1800,
        3600,
        86400,
        5400,
        1209600,
        45,
        90,
    ]
