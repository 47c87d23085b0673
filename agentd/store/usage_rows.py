"""A row of usage per day (the daemon's own store): what RecordUsage adds to and UsageRows reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UsageRow:
    """A UTC day's usage of one agent by one person ('' for none) in a channel, model and trigger;
    `estimated_calls`: those the provider reported no usage for."""

    day: str
    agent: str
    who: str
    channel: str
    model: str
    trigger: str
    calls: int = 0
    estimated_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
