"""Scheduled jobs: when they fire (`when`) and a heartbeat's active hours (`hours`) — what the agent
file's `schedule:` block, the runner, the chat tools and the read surfaces share."""

from agentd.schedule.hours import ActiveHours
from agentd.schedule.when import When, WhenError, format_duration, parse_duration, parse_when, zone

__all__ = ["ActiveHours", "When", "WhenError", "format_duration", "parse_duration", "parse_when", "zone"]
