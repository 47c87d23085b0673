"""`channels.telegram` in an agent file."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentd.config.base import Spec

# What Telegram accepts as a webhook secret_token.
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


class TelegramSpec(Spec):
    token: str
    mode: Literal["polling", "webhook"] = "polling"
    secret_token: str | None = None  # required in webhook mode; checked on every POST /telegram/<agent>
    webhook_url: str | None = None  # required in webhook mode: the public URL Telegram calls (setWebhook)
    # mentions: in groups only when @mentioned, replied to, or sent a command (private chats always);
    # all: every message the bot can see.
    respond_to: Literal["mentions", "all"] = "mentions"
    per_user: bool = False  # in groups, one conversation per person (private chats always are)
    # Numeric ids (a private chat's id is the user's id). Usernames are not accepted: they can change hands.
    allowed_users: list[str] = []
    allowed_chats: list[str] = []
    # Show the reply as it is written: one message posted at the first text, edited as it grows (at most
    # every stream_edit_seconds; more messages past the platform's limit), ending exactly as unstreamed.
    stream: bool = False
    stream_edit_seconds: float = Field(default=1.5, gt=0)
    poll_timeout: float = 30.0  # seconds a getUpdates long poll is held open (polling mode)
    api_base_url: str | None = None  # server root, default https://api.telegram.org; tests or a local Bot API

    @field_validator("allowed_users", "allowed_chats", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # YAML reads `[12345]` as ints; ids are compared as strings.
        if isinstance(value, list):
            return [
                str(item) if isinstance(item, int) and not isinstance(item, bool) else item for item in value
            ]
        return value

    @model_validator(mode="after")
    def _webhook_needs_secret_and_url(self) -> TelegramSpec:
        if self.secret_token is not None and not _SECRET_RE.match(self.secret_token):
            raise ValueError(
                "secret_token must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)"
            )
        if self.mode == "webhook":
            if not self.secret_token:
                raise ValueError("mode webhook needs secret_token (checked on every POST /telegram/<agent>)")
            if not self.webhook_url:
                raise ValueError(
                    "mode webhook needs webhook_url: the public https URL that reaches POST /telegram/<agent>"
                )
        if self.poll_timeout <= 0:
            raise ValueError("poll_timeout must be a positive number of seconds")
        return self
