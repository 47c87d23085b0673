"""`channels.telegram` in an agent file."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from agentd.config.base import Spec


class TelegramSpec(Spec):
    token: str
    mode: Literal["polling", "webhook"] = "polling"
    secret_token: str | None = None  # required in webhook mode
    webhook_url: str | None = None  # public URL Telegram should call; registered with setWebhook
    respond_to: Literal["mentions", "all"] = "mentions"
    per_user: bool = False
    allowed_users: list[str] = []
    allowed_chats: list[str] = []
    api_base_url: str | None = None  # only changed for tests or proxies

    @model_validator(mode="after")
    def _webhook_needs_secret(self) -> TelegramSpec:
        if self.mode == "webhook" and not self.secret_token:
            raise ValueError("mode webhook needs secret_token (checked on every POST /telegram/<agent>)")
        return self
