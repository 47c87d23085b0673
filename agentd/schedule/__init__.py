"""Scheduled jobs: when they fire (`when`), the heartbeat's active hours (`hours`), and what the
runner, the chat tools and the read surfaces share."""

from agentd.schedule.when import When, WhenError, format_duration, parse_duration, parse_when, zone

__all__ = ["When", "WhenError", "format_duration", "parse_duration", "parse_when", "zone"]
