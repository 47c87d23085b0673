"""`prices:`, `budgets:` and `rate_limits:` in agentd.yaml: what model calls cost, how much may be spent,
and how fast a person or channel may send.

A budget's limit is money ("$2/day", "$300/month") or tokens ("2M tokens/day", "500k tokens/month"),
over a calendar day or month in the budget's `timezone` (default UTC). A rate limit is "20/minute"
(also /second, /hour): a token bucket holding that many, refilled evenly over the unit.
"""

from __future__ import annotations

import re
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from agentd.config.base import Spec

_MONEY_RE = re.compile(r"^\$\s*(\d+(?:\.\d+)?)\s*/\s*(day|month)$")
_TOKENS_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kKmM]?)\s*tokens\s*/\s*(day|month)$")
_RATE_RE = re.compile(r"^([1-9][0-9]*)\s*/\s*(second|minute|hour)$")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}
_SECONDS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
MICROS = 1_000_000  # money is counted in millionths of a dollar: a price per 1M tokens is micros per token

# Dollars per 1M tokens (input, output) of well-known models, as their providers list them; `prices:`
# overrides or adds. A model missing from both costs nothing (its tokens still count toward token limits).
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "openai/gpt-4.1": (2.00, 8.00),
    "openai/gpt-4.1-mini": (0.40, 1.60),
    "openai/gpt-4.1-nano": (0.10, 0.40),
    "openai/gpt-4o": (2.50, 10.00),
    "openai/gpt-4o-mini": (0.15, 0.60),
    "openai/text-embedding-3-small": (0.02, 0.0),
    "openai/text-embedding-3-large": (0.13, 0.0),
    "anthropic/claude-opus-4-1": (15.00, 75.00),
    "anthropic/claude-sonnet-4-5": (3.00, 15.00),
    "anthropic/claude-haiku-4-5": (1.00, 5.00),
}


class PriceSpec(Spec):
    input: float = Field(ge=0, description="dollars per 1M input tokens")
    output: float = Field(default=0.0, ge=0, description="dollars per 1M output tokens")


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {value!r} (expected an IANA name such as Europe/Lisbon)"
        ) from None
    return value


class BudgetSpec(Spec):
    per: Literal["person", "agent", "channel", "job"]
    # which agent / channel / job the budget covers; unset: each one separately (per: person always is)
    agent: str | None = None
    channel: str | None = None
    job: str | None = None
    limit: str = Field(
        description='"$2/day", "$300/month", "2M tokens/day" or "500k tokens/month"',
        json_schema_extra={
            "pattern": r"^(\$\s*\d+(\.\d+)?|\d+(\.\d+)?\s*[kKmM]?\s*tokens)\s*/\s*(day|month)$"
        },
    )
    on_exceed: Literal["refuse", "small_model"] = "refuse"
    timezone: str = "UTC"  # where the calendar day or month of the limit starts and ends

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        return _zone(v)

    @model_validator(mode="after")
    def _limit_parses(self) -> BudgetSpec:
        self.amount()
        return self

    def amount(self) -> tuple[Literal["money", "tokens"], int, Literal["day", "month"]]:
        """(unit, the limit in micro-dollars or tokens, period)."""
        text = self.limit.strip()
        if m := _MONEY_RE.match(text):
            return "money", round(float(m.group(1)) * MICROS), m.group(2)  # type: ignore[return-value]
        if m := _TOKENS_RE.match(text):
            return "tokens", round(float(m.group(1)) * _SCALE[m.group(2).lower()]), m.group(3)  # type: ignore[return-value]
        raise ValueError(
            f'limit {self.limit!r}: expected money or tokens per day or month, e.g. "$2/day", "2M tokens/day"'
        )


class RateLimitSpec(Spec):
    per: Literal["person", "channel", "agent"]
    channel: str | None = None  # only this channel's events (per: channel without it: each channel)
    agent: str | None = None
    limit: str = Field(
        description='"20/minute" (also /second, /hour): at most that many, refilled evenly',
        json_schema_extra={"pattern": r"^[1-9][0-9]*\s*/\s*(second|minute|hour)$"},
    )

    @model_validator(mode="after")
    def _limit_parses(self) -> RateLimitSpec:
        self.rate()
        return self

    def rate(self) -> tuple[int, float]:
        """(how many, per how many seconds)."""
        m = _RATE_RE.match(self.limit.strip())
        if m is None or int(m.group(1)) < 1:
            raise ValueError(
                f'limit {self.limit!r}: expected a count per second, minute or hour, e.g. "20/minute"'
            )
        return int(m.group(1)), _SECONDS[m.group(2)]


def price_table(prices: dict[str, PriceSpec]) -> dict[str, tuple[float, float]]:
    """The prices in force: the defaults, overridden and extended by agentd.yaml's `prices:`."""
    return {**DEFAULT_PRICES, **{ref: (p.input, p.output) for ref, p in prices.items()}}
