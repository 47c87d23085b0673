"""agentd.yaml's `http:` (where the API listens, its token) and `store:` (SQLite files or one
PostgreSQL), read by the daemon."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from agentd.config.base import Spec

_OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# `is_loopback` for an editor, in its usual spellings (an unusual one of ::1, say 0::1, the schema
# asks a token for where the loader would not)
LOOPBACK_RE = rf"^(localhost|127(\.{_OCTET}){{3}}|::1|0:0:0:0:0:0:0:1)$"


class HttpSpec(Spec):
    # `_token_beyond_loopback` for an editor
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["host"], "properties": {"host": {"not": {"pattern": LOOPBACK_RE}}}},
            "then": {"required": ["token"], "properties": {"token": {"type": "string", "minLength": 1}}},
        }
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    token: str | None = None
    # a message's 32,000 characters may take 12 bytes each as JSON (\ud83d\ude00 escapes)
    max_body_bytes: int = Field(default=1_048_576, gt=0)

    @field_validator("token")
    @classmethod
    def _empty_is_none(cls, v: str | None) -> str | None:
        # `token: "${AGENTD_TOKEN:-}"` with the variable unset means: no token
        return v or None

    @model_validator(mode="after")
    def _token_beyond_loopback(self) -> HttpSpec:
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"refusing to listen on {self.host} without a token: set http.token (every request then "
                "needs Authorization: Bearer <token>), or bind to 127.0.0.1"
            )
        return self


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host` (anything else needs http.token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StoreSpec(Spec):
    # NORMAL: an OS crash may lose the last commits but never corrupts; a killed
    # process loses nothing. FULL: fsync on every commit group.
    synchronous: Literal["normal", "full"] = "normal"
    # agent files open at once (each holds up to 3 descriptors: the file, its -wal and -shm); the
    # least recently used beyond this are closed, and so is any unused for close_idle_after_s
    max_open_files: int = Field(default=256, ge=1)
    close_idle_after_s: float = Field(default=60.0, gt=0)
    # one budget for the conversations kept in memory by every agent, in MB (least recently used go first)
    hot_cache_mb: float = Field(default=512, gt=0)
    # postgresql://user:password@host:port/database puts every agent in one PostgreSQL database that
    # several daemons may share (AGENTD_STORE_URL says the same); none: one SQLite file per agent
    url: str | None = Field(default=None, json_schema_extra={"pattern": r"^postgres(ql)?://|^\s*$"})
    # With several daemons on one store: how long a lease (a conversation being answered, a bot
    # connection) outlives a daemon that stopped renewing it (killed), before another takes over.
    lease_s: float = Field(default=15.0, ge=1.0, le=600.0)
    # What sits between agentd and PostgreSQL: none, or PgBouncer in `session` or `transaction` pool
    # mode (transaction: no server-side prepared statements nor session state; docs/scaling.md)
    pooler: Literal["none", "session", "transaction"] = "none"

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None  # (an empty ${VAR:-}: SQLite)
        if not re.match(r"^postgres(ql)?://", v):
            raise ValueError("expected a postgresql:// URL (postgresql://user:password@host:port/database)")
        return v
