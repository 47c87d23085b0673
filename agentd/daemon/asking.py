"""A tool server's question into the conversation it serves (the Fleet's `Outbox.ask`): a chat
channel posts it; a webhook conversation with `channels.webhook.deliver_url` gets it as a signed
`elicitation.requested` event (agentd.channels.webhook_delivery), once — the question expires long
before any retry schedule would matter, and a caller that missed it still reads it at
GET /agents/{agent}/questions."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from agentd.channels.webhook_delivery import DeliveryFailed, question_message, send_signed
from agentd.clock import Clock
from agentd.config.models import AgentSpec

log = logging.getLogger(__name__)
WEBHOOK = "webhook"


async def ask(
    agent: str,
    spec: AgentSpec | None,
    http: httpx.AsyncClient | None,
    clock: Clock,
    post: Callable[[], Awaitable[bool]],
    conversation_key: str,
    text: str,
    question: Mapping[str, Any],
) -> str | None:
    """How the question went out ("posted", "webhook"), None when it did not."""
    if not conversation_key.startswith(f"{WEBHOOK}:"):
        return "posted" if await post() else None
    webhook = spec.channels.webhook if spec is not None else None
    if webhook is None or not webhook.deliver_url or not webhook.signing_secret or http is None:
        return None
    now = clock.time()
    message = question_message(agent=agent, question=question, text=text, now=now)
    try:
        await send_signed(
            http,
            webhook.deliver_url,
            webhook.signing_secret,
            delivery_id=f"question_{question['id']}",
            payload=message,
            now=now,
        )
    except DeliveryFailed as e:
        log.warning("question %s into %s not delivered: %s", question["id"], conversation_key, e)
        return None
    return "webhook"
