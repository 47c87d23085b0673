"""`channels.slack` in an agent file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agentd.config.base import Spec


class SlackSpec(Spec):
    bot_token: str  # xoxb-...
    app_token: str | None = None  # xapp-...: Socket Mode (no public URL needed)
    signing_secret: str | None = None  # Events API over HTTP at POST /slack/<agent>/events
    # mentions: in channels answer only when @mentioned (DMs always); all: every message.
    respond_to: Literal["mentions", "all"] = "mentions"
    per_user: bool = False  # in channels, one conversation per person (DMs are per person anyway)
    threads: bool = True  # a top-level message starts a thread, and each thread is its own conversation
    allowed_users: list[str] = []  # Slack user ids (U...); empty: everyone
    # Slack conversation ids; empty: everywhere. When set it applies to DMs too (their ids start with D).
    allowed_channels: list[str] = []
    # Show the reply as it is written: one message posted at the first text, edited as it grows (at most
    # every stream_edit_seconds; more messages past the platform's limit), ending exactly as unstreamed.
    stream: bool = False
    stream_edit_seconds: float = Field(default=1.5, gt=0)
    api_base_url: str | None = None  # only changed for tests or proxies, e.g. "http://127.0.0.1:9000/api/"

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSpec:
        if bool(self.app_token) == bool(self.signing_secret):
            raise ValueError(
                "set exactly one of app_token (Socket Mode) or signing_secret (Events API over HTTP)"
            )
        return self
