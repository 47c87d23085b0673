"""`channels.discord` in an agent file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentd.config.base import Spec


class DiscordSpec(Spec):
    token: str
    # mentions: answer in servers only when mentioned (DMs always); all: every message.
    respond_to: Literal["mentions", "all"] = "mentions"
    # One history per person in server channels and threads (DMs are always per person).
    per_user: bool = False
    # Server (guild) ids the bot answers in; empty means any. When set, direct messages
    # are answered only from users listed in allowed_users, so a DM cannot bypass it.
    allowed_guilds: list[str] = []
    # User ids the bot answers; empty means anyone (within allowed_guilds).
    allowed_users: list[str] = []
    # Show the reply as it is written: one message posted at the first text, edited as it grows (at most
    # every stream_edit_seconds; more messages past the platform's limit), ending exactly as unstreamed.
    stream: bool = False
    stream_edit_seconds: float = Field(default=1.5, gt=0)
    # Where the REST API (including the version, e.g. "http://127.0.0.1:8123/api/v10") and
    # the gateway ("ws://127.0.0.1:8123/") live; only changed for tests or proxies. discord.py
    # keeps these process-wide, so every Discord channel in one daemon shares them.
    api_base_url: str | None = None
    gateway_url: str | None = None
