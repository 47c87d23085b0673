"""Channel kinds by config key; built-ins register the way a plugin would (import path, loaded on use)."""

from __future__ import annotations

import pkgutil
from typing import Any

from agentd.channels.base import Channel

# config key under `channels:` -> "module:Class"; the class is built as Class(agent_name, spec).
CHANNEL_KINDS: dict[str, str] = {
    "discord": "agentd.channels.discord:DiscordChannel",
    "slack": "agentd.channels.slack:SlackChannel",
    "telegram": "agentd.channels.telegram:TelegramChannel",
}


def build_channel(kind: str, agent: str, spec: Any) -> Channel:
    cls = pkgutil.resolve_name(CHANNEL_KINDS[kind])
    channel: Channel = cls(agent, spec)
    return channel
