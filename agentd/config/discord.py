"""`channels.discord` in an agent file."""

from __future__ import annotations

from typing import Literal

from agentd.config.base import Spec


class DiscordSpec(Spec):
    token: str
    # mentions: answer in servers only when mentioned (DMs always); all: every message.
    respond_to: Literal["mentions", "all"] = "mentions"
    per_user: bool = False
    allowed_guilds: list[str] = []
    allowed_users: list[str] = []
    # Where the REST API and gateway live; only changed for tests or proxies.
    api_base_url: str | None = None
    gateway_url: str | None = None
