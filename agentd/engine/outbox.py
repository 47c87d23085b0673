"""Posting into a conversation outside a reply (a run resumed after an approval, a tool server's
question), without knowing who hosts the conversation's channel.

The daemon gives each agent an `Outbox` that reaches its chat channels (and, for a question, the
webhook's `deliver_url`); a conversation whose channel cannot be posted to (a webhook without one, a
sub-agent's) gets False (None) and the caller delivers the text some other way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Outbox(Protocol):
    async def post(self, agent: str, conversation_key: str, text: str) -> bool:
        """Post `text` into the conversation; False when its channel cannot (or did not)."""
        ...

    async def ask(
        self, agent: str, conversation_key: str, text: str, question: Mapping[str, Any]
    ) -> str | None:
        """Put a tool server's question (`text` in words; `question` as a program reads it, see
        Asked.describe) to the conversation; how it went out ("posted", "webhook"), None when it could not."""
        ...


class NoOutbox:
    async def post(self, agent: str, conversation_key: str, text: str) -> bool:
        return False

    async def ask(
        self, agent: str, conversation_key: str, text: str, question: Mapping[str, Any]
    ) -> str | None:
        return None
