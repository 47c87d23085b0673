"""Posting into a conversation outside a reply (a run resumed after an approval), without knowing who
hosts the conversation's channel.

The daemon gives each agent an `Outbox` that reaches its chat channels; a
conversation whose channel cannot be posted to (the webhook, a sub-agent's)
gets False and the caller delivers the text some other way.
"""

from __future__ import annotations

from typing import Protocol


class Outbox(Protocol):
    async def post(self, agent: str, conversation_key: str, text: str) -> bool:
        """Post `text` into the conversation; False when its channel cannot (or did not)."""
        ...


class NoOutbox:
    async def post(self, agent: str, conversation_key: str, text: str) -> bool:
        return False
