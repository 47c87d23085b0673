"""`channels.webhook` in an agent file: POST /agents/<name>/messages in, and — for scheduled jobs,
which have no request to answer — signed POSTs out to `deliver_url` (agentd.channels.webhook_delivery).

```yaml
channels:
  webhook:
    deliver_url: https://example.com/agentd-hook   # where a job made over the webhook delivers
    signing_secret: ${WEBHOOK_SIGNING_SECRET}       # HMAC-SHA256 key of every delivery's signature
```
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator, model_validator

from agentd.config.base import Spec

_URL_RE = r"^https?://[^\s/]+"
# an HMAC key shorter than this is guessable; 32 random bytes as hex or base64 are well over it
MIN_SECRET_CHARS = 16


class WebhookSpec(Spec):
    """`channels.webhook: {}` enables POST /agents/<name>/messages."""

    # `_signed` for an editor
    model_config = ConfigDict(json_schema_extra={"dependentRequired": {"deliver_url": ["signing_secret"]}})

    deliver_url: str | None = Field(default=None, json_schema_extra={"pattern": _URL_RE})
    signing_secret: str | None = Field(default=None, min_length=MIN_SECRET_CHARS)

    @field_validator("deliver_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(_URL_RE, v):
            raise ValueError(f"expected an http:// or https:// URL, got {v!r}")
        return v

    @field_validator("signing_secret", mode="before")
    @classmethod
    def _empty_is_none(cls, v: object) -> object:
        # `signing_secret: "${WEBHOOK_SIGNING_SECRET:-}"` with the variable unset means: none
        return v or None

    @model_validator(mode="after")
    def _signed(self) -> WebhookSpec:
        if self.deliver_url is not None and self.signing_secret is None:
            raise ValueError(
                "deliver_url needs signing_secret: every delivery carries an HMAC-SHA256 signature of "
                "its body under it, so the receiver can tell it came from this agent"
            )
        return self
