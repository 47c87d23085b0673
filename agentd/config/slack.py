"""`channels.slack` in an agent file."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from agentd.config.base import Spec


class SlackSpec(Spec):
    bot_token: str
    app_token: str | None = None  # Socket Mode
    signing_secret: str | None = None  # Events API over HTTP at POST /slack/<agent>/events
    respond_to: Literal["mentions", "all"] = "mentions"
    per_user: bool = False
    threads: bool = True
    allowed_users: list[str] = []
    allowed_channels: list[str] = []
    api_base_url: str | None = None  # only changed for tests or proxies

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSpec:
        if bool(self.app_token) == bool(self.signing_secret):
            raise ValueError("set exactly one of app_token (Socket Mode) or signing_secret (Events API over HTTP)")
        return self
