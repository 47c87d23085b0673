"""The agent file's `schedule:` block and `channels.webhook`'s delivery settings: the issue's file loads
to seconds and zones, and what is wrong is named with file:line, by the loader and by `agentd check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config.folder import check_agents
from agentd.config.loader import parse_agent
from agentd.config.schedule import DeliverySpec
from agentd.errors import ConfigError
from agentd.schedule import ActiveHours, WhenError

ISSUE_FILE = """\
purpose: You keep the team on track.
channels:
  slack: {bot_token: xoxb-1, app_token: xapp-1}
  telegram: {token: "1:x"}
  webhook:
    deliver_url: https://example.com/hook
    signing_secret: 0123456789abcdef0123
schedule:
  timezone: Europe/Lisbon
  from_chat: true
  max_jobs_per_person: 20
  min_interval: 5m
  missed: run_once
  catch_up_within: 6h
  pause_after_failures: 5
  jobs:
    standup:
      cron: "0 9 * * 1-5"
      prompt: Summarise what is still open for the team.
      deliver: {channel: slack, to: C0123ABC}
    drink:
      every: 2h
      kind: reminder
      prompt: Drink water.
      deliver: {channel: telegram, to: -1001234}
    party:
      at: 2099-12-24T18:00
      prompt: Say happy holidays.
      deliver: {channel: webhook}
  heartbeat:
    every: 30m
    active_hours: "08:00-22:00"
    prompt: Is there anything the person should hear about now?
    deliver: last
"""


def load(text: str) -> object:
    return parse_agent(Path("bot.yaml"), text=text, env={})


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(text)
    return [str(p) for p in caught.value.problems]


def test_the_issue_file_loads() -> None:
    spec = load(ISSUE_FILE)
    schedule = spec.schedule  # type: ignore[attr-defined]
    assert schedule.timezone == "Europe/Lisbon"
    assert (schedule.min_interval, schedule.catch_up_within) == (300, 6 * 3600)
    assert (schedule.missed, schedule.pause_after_failures, schedule.max_jobs_per_person) == (
        "run_once",
        5,
        20,
    )
    standup, drink, party = schedule.jobs["standup"], schedule.jobs["drink"], schedule.jobs["party"]
    assert (standup.kind, standup.deliver) == ("task", DeliverySpec(channel="slack", to="C0123ABC"))
    assert (drink.kind, drink.every, drink.deliver.to) == ("reminder", 7200, "-1001234")
    assert standup.when(schedule.timezone, now=0).describe() == (
        "At 09:00 on Monday through Friday (Europe/Lisbon)"
    )
    assert party.when(schedule.timezone, now=0).describe() == "once at 2099-12-24 18:00 (Europe/Lisbon)"
    assert schedule.heartbeat.deliver == "last"
    assert schedule.heartbeat.hours == ActiveHours.parse("08:00-22:00")
    webhook = spec.channels.webhook  # type: ignore[attr-defined]
    assert (webhook.deliver_url, webhook.signing_secret) == (
        "https://example.com/hook",
        "0123456789abcdef0123",
    )


def test_no_block_means_no_jobs_and_an_empty_block_every_default() -> None:
    assert load("purpose: p\n").schedule is None  # type: ignore[attr-defined]
    schedule = load("purpose: p\nschedule: {}\n").schedule  # type: ignore[attr-defined]
    assert (schedule.timezone, schedule.from_chat, schedule.min_interval, schedule.missed) == (
        "UTC",
        True,
        300,
        "run_once",
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("timezone: Europe/Lisbon", "timezone: Mars/Base"),
            "bot.yaml:9:13: schedule.timezone: unknown time zone 'Mars/Base' (expected an IANA name like Europe/Lisbon)",
        ),
        (
            ('cron: "0 9 * * 1-5"', 'cron: "0 25 * * 1-5"'),
            "bot.yaml:18:13: schedule.jobs.standup.cron: cron '0 25 * * 1-5' does not parse: bad hour",
        ),
        (
            ("at: 2099-12-24T18:00", "at: 2020-12-24T18:00"),
            "bot.yaml:27:11: schedule.jobs.party.at: 2020-12-24T18:00 is in the past",
        ),
        (
            ("at: 2099-12-24T18:00", "at: next christmas"),
            "bot.yaml:27:11: schedule.jobs.party.at: 'next christmas' is not an ISO date-time (expected e.g. "
            "2026-12-24T18:00)",
        ),
        (
            ("{channel: slack, to: C0123ABC}", "{channel: discord, to: '123'}"),
            "bot.yaml:20:26: schedule.jobs.standup.deliver.channel: the agent has no discord channel to deliver "
            "to (its channels: webhook, slack, telegram)",
        ),
        (
            ("{channel: telegram, to: -1001234}", "{channel: telegram}"),
            "bot.yaml:25:26: schedule.jobs.drink.deliver.channel: a telegram delivery needs `to:` (the chat id)",
        ),
        (
            ("missed: run_once", "missed: twice"),
            "bot.yaml:13:11: schedule.missed: expected 'run_once' or 'skip'",
        ),
        (
            ("min_interval: 5m", "min_interval: soon"),
            "bot.yaml:12:17: schedule.min_interval: 'soon' is not a duration (expected e.g. 30m, 1h, 1d)",
        ),
        (
            ("    every: 30m\n", "    every: 30m\n    colour: red\n"),
            "bot.yaml:32:5: unknown key 'colour'; expected one of: every, active_hours, prompt, deliver",
        ),
        (
            ("      every: 2h\n", "      every: 2h\n      cron: '* * * * *'\n"),
            "bot.yaml:22:7: schedule.jobs.drink: give exactly one of cron, every or at (got cron, every)",
        ),
        (
            ('active_hours: "08:00-22:00"', 'active_hours: "08:00-08:00"'),
            "bot.yaml:32:19: schedule.heartbeat.active_hours: '08:00-08:00' is an empty range of hours (leave "
            "active_hours out for all day)",
        ),
        (
            ("    signing_secret: 0123456789abcdef0123\n", ""),
            "bot.yaml:6:5: channels.webhook: deliver_url needs signing_secret: every delivery carries an "
            "HMAC-SHA256 signature of its body under it, so the receiver can tell it came from this agent",
        ),
    ],
)
def test_what_is_wrong_is_named_with_file_and_line(change: tuple[str, str], expected: str) -> None:
    old, new = change
    assert old in ISSUE_FILE
    assert problems(ISSUE_FILE.replace(old, new)) == [expected]


def test_agentd_check_says_the_same(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "bot.yaml").write_text(ISSUE_FILE.replace("at: 2099-12-24T18:00", "at: 2020-12-24T18:00"))
    result = check_agents(agents)
    assert [str(p) for e in result.errors for p in e.problems] == [
        f"{agents / 'bot.yaml'}:27:11: schedule.jobs.party.at: 2020-12-24T18:00 is in the past"
    ]


def test_active_hours() -> None:
    day = ActiveHours.parse("08:00-22:00")
    lisbon = "Europe/Lisbon"
    # 2026-07-01 is summer time in Lisbon: 07:30 UTC is 08:30 local
    assert day.contains(1782891000.0, lisbon)  # 2026-07-01T07:30Z
    assert not day.contains(1782891000.0 - 3600, lisbon)  # 07:30 local
    assert day.next_open(1782891000.0 - 3600, lisbon) == 1782891000.0 - 1800  # 08:00 local
    night = ActiveHours.parse("22:00-06:00")
    assert night.contains(1782891000.0 - 5 * 3600, lisbon)  # 03:30 local
    assert night.next_open(1782891000.0, lisbon) == 1782891000.0 + 13.5 * 3600  # 22:00 local
    for bad in ("8-22", "08:00-25:00", "08:00"):
        with pytest.raises(WhenError):
            ActiveHours.parse(bad)
