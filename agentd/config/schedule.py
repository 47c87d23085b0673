"""`schedule:` in an agent file: the operator's jobs, the heartbeat, and the bounds on jobs made from
the chat.

```yaml
schedule:
  timezone: Europe/Lisbon          # default for this agent's jobs (IANA name); default UTC
  from_chat: true                  # offer the job tools to the model (default true)
  max_jobs_per_person: 20
  min_interval: 5m                 # a recurring job made from the chat fires at most this often
  missed: run_once                 # run_once (one catch-up per job) | skip; within catch_up_within
  catch_up_within: 6h
  pause_after_failures: 5
  jobs:
    standup:
      cron: "0 9 * * 1-5"          # or  every: 30m   or  at: 2026-12-24T18:00
      prompt: Summarise what is still open for the team.
      deliver: {channel: slack, to: C0123ABC}
  heartbeat:
    every: 30m
    active_hours: "08:00-22:00"
    prompt: Is there anything the person should hear about now?
    deliver: last
```

What one key shows is checked by its validator (a cron that does not parse, an unknown zone); what
needs two parts of the file (a job's `at:` read in the schedule's zone, a delivery on a channel the
agent has) is `reference_problems`, which the loader locates at the key like the tools' references.
Without a `schedule:` block an agent has no jobs and no job tools; `schedule: {}` is every default.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from agentd.clock import SYSTEM_CLOCK
from agentd.config.base import Spec
from agentd.config.tools import Loc
from agentd.config.webhook import WebhookSpec
from agentd.schedule import ActiveHours, When, WhenError, parse_duration, parse_when, zone
from agentd.schedule.hours import HOURS_PATTERN

DURATION_PATTERN = r"^\s*(\d+\s*[smhdwSMHDW]\s*)+$"
JOB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
DELIVERY_CHANNELS = ("slack", "telegram", "discord", "webhook")


def _seconds(value: Any) -> Any:
    try:
        return parse_duration(value) if isinstance(value, str | int | float) else value
    except WhenError as e:
        raise ValueError(str(e)) from None


# `30m`, `6h`, `1d` in the file; seconds in the spec
Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "exclusiveMinimum": 0},
            ]
        }
    ),
]


def _zone_name(value: str) -> str:
    try:
        zone(value)
    except WhenError as e:
        raise ValueError(str(e)) from None
    return value


class DeliverySpec(Spec):
    """Where a job's message goes: a Slack channel id, a Telegram chat id, a Discord channel id, or for
    the webhook a URL (`to` left out: the webhook's `deliver_url`)."""

    channel: Literal["slack", "telegram", "discord", "webhook"]
    to: str | None = None

    @field_validator("to", mode="before")
    @classmethod
    def _id_as_string(cls, value: Any) -> Any:
        # YAML reads a Telegram chat id (-1001234) as an int; ids are compared as strings
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def problem(self, enabled: Collection[str], webhook: WebhookSpec | None) -> str | None:
        """Why nothing can be delivered here, with the agent's `enabled` channels and its webhook's
        settings, or None."""
        if self.channel not in enabled:
            return (
                f"the agent has no {self.channel} channel to deliver to "
                f"(its channels: {', '.join(enabled) or 'none'})"
            )
        if self.channel == "webhook":
            if self.to is None and (webhook is None or webhook.deliver_url is None):
                return "a webhook delivery needs `to: <url>` or channels.webhook.deliver_url"
            if self.to is not None and not self.to.startswith(("http://", "https://")):
                return f"a webhook delivery's `to` is an http:// or https:// URL, got {self.to!r}"
            if webhook is not None and not webhook.signing_secret:
                return "a webhook delivery is signed: set channels.webhook.signing_secret"
        elif not self.to:
            return f"a {self.channel} delivery needs `to:` (the {_ID_NAMES[self.channel]})"
        return None


_ID_NAMES = {"slack": "channel id, C…", "telegram": "chat id", "discord": "channel id"}


class _Timed(Spec):
    # `_one_schedule` for an editor
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["cron"]}, {"required": ["every"]}, {"required": ["at"]}]}
    )

    cron: str | None = None
    every: Duration | None = None
    at: str | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            _raise_as_value_error(lambda: parse_when({"cron": value}, "UTC", now=0.0))
        return value

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> Any:
        # YAML reads 2026-12-24T18:00:00 (with seconds) and 2026-12-24 as a datetime and a date
        if isinstance(value, date):
            value = value.isoformat()
        if isinstance(value, str):  # the form here; the past, in the schedule's zone, is a reference
            _raise_as_value_error(lambda: parse_when({"at": value}, "UTC", now=float("-inf")))
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> _Timed:
        given = [k for k in ("cron", "every", "at") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of cron, every or at"
                + (f" (got {', '.join(given)})" if given else ' (e.g. cron: "0 9 * * 1-5")')
            )
        return self

    def when(self, tz: str, *, now: float) -> When:
        """The schedule as a `When` in zone `tz` (`every` counted from `now`); raises WhenError."""
        spec = {"cron": self.cron} if self.cron is not None else {"at": self.at}
        return parse_when({"every": self.every} if self.every is not None else spec, tz, now=now)


def _raise_as_value_error(parse: Callable[[], object]) -> None:
    try:
        parse()
    except WhenError as e:
        raise ValueError(str(e)) from None


class JobSpec(_Timed):
    """One of the operator's jobs: a task runs the agent with `prompt` and delivers the reply; a
    reminder delivers `prompt` as written, with no model call."""

    prompt: str = Field(min_length=1)
    kind: Literal["task", "reminder"] = "task"
    deliver: DeliverySpec


class HeartbeatSpec(Spec):
    """The agent checking in on its own; it says nothing when it has nothing to say."""

    every: Duration
    active_hours: str | None = Field(default=None, json_schema_extra={"pattern": HOURS_PATTERN})
    prompt: str = Field(default="Is there anything the person should hear about now?", min_length=1)
    # last: the conversation the agent's people used last
    deliver: Literal["last"] | DeliverySpec = "last"

    @field_validator("active_hours")
    @classmethod
    def _hours(cls, value: str | None) -> str | None:
        if value is not None:
            _raise_as_value_error(lambda: ActiveHours.parse(value))
        return value

    @property
    def hours(self) -> ActiveHours | None:
        return ActiveHours.parse(self.active_hours) if self.active_hours else None


class ScheduleSpec(Spec):
    timezone: str = "UTC"  # an IANA name
    from_chat: bool = True  # offer the job tools to the model
    max_jobs_per_person: int = Field(default=20, ge=0, le=10_000)
    min_interval: Duration = 300.0  # seconds; a recurring job made from the chat fires at most this often
    missed: Literal["run_once", "skip"] = "run_once"
    catch_up_within: Duration = 6 * 3600.0  # seconds
    pause_after_failures: int = Field(default=5, ge=1, le=1000)
    jobs: dict[Annotated[str, Field(pattern=JOB_NAME_PATTERN)], JobSpec] = {}
    heartbeat: HeartbeatSpec | None = None

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return _zone_name(value)

    def reference_problems(
        self, enabled: Collection[str], webhook: WebhookSpec | None, now: float | None = None
    ) -> list[tuple[Loc, str]]:
        """What needs more than one key: an `at:` past in the schedule's zone (at `now`, default the
        wall clock), a delivery on a channel the agent does not have (`enabled`, `webhook`: its
        channels)."""
        now = SYSTEM_CLOCK.time() if now is None else now
        problems: list[tuple[Loc, str]] = []
        for name, job in self.jobs.items():
            if job.at is not None:
                try:
                    job.when(self.timezone, now=now)
                except WhenError as e:
                    problems.append((("schedule", "jobs", name, "at"), str(e)))
            if (why := job.deliver.problem(enabled, webhook)) is not None:
                problems.append((("schedule", "jobs", name, "deliver", "channel"), why))
        heartbeat = self.heartbeat
        if heartbeat is not None and isinstance(heartbeat.deliver, DeliverySpec):
            if (why := heartbeat.deliver.problem(enabled, webhook)) is not None:
                problems.append((("schedule", "heartbeat", "deliver", "channel"), why))
        return problems
