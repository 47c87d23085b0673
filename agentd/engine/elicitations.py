"""An MCP server asking the person for input mid-call (`elicitation/create`), through the approval channel.

The question goes to the person whose message the call serves, in their
conversation: posted there when its channel can post (Slack, Telegram,
Discord), delivered as a signed event to `channels.webhook.deliver_url` for a
webhook conversation that has one, else shown by the streamed reply (as its
progress: the webhook's and `agentd chat`'s) when the reply is streamed; a
non-streamed webhook request's question waits to be read and answered over
HTTP (`GET /agents/{agent}/questions`, `POST .../questions/{id}`, as the
operator answers an approval). In chat they answer out of band, as they answer
an approval (never queued behind the run that waits): `/answer <id> <text or
JSON>` or `/decline <id>`; only they can (over HTTP: whoever holds the token).
A form's answer is one value when the form has one field, else a JSON object of
its fields, each taken to the field's type (agentd.engine.elicit_forms); a URL
request's answer is any text once they have been there. Unanswered within
`tools.approval_timeout_s` (and the call's own `max_s`, which the wait holds
open) it expires, and the server is told `cancel`. Each step is an audit event
like an approval's: `{kind: tool, action: elicitation_requested |
elicitation_answered | elicitation_declined | elicitation_expired |
elicitation_refused, server, user, id, fields, via}`; what the person answered
is never written.

A request that cannot be put down to one conversation (several calls in flight
on that server, or none), or whose conversation agentd cannot reach, is
refused (`cancel`) and audited as such. Waiting questions live in memory: the
server's request dies with the connection anyway.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.engine.elicit_forms import checked_content, typed_content
from agentd.engine.state import AgentState
from agentd.events import InboundEvent, Reply
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit
from agentd.tools.base import ToolCall

_ANSWER_RE = re.compile(r"^/(answer|decline)(?:@\S+)?(?:\s+\[?([0-9a-fA-F]{6})\]?)?(?:\s+(.*))?$", re.S)
CLOSED_KEPT = 256  # answered questions remembered, so a late second answer is told so (HTTP: a 409)
LISTED_CHANNEL = "webhook"  # a conversation whose questions, reaching it no other way, wait to be read


def is_elicitation_command(text: str) -> bool:
    return text.startswith("/") and _ANSWER_RE.match(text.strip()) is not None


@dataclass
class Asked:
    id: str
    server: str
    conversation_key: str
    user_id: str | None
    fields: dict[str, Any]  # the form's properties (empty for a URL request)
    mode: str = "form"
    message: str = ""
    url: str | None = None
    required: list[str] = field(default_factory=list)
    expires_at: float = 0.0  # on the Elicitations' clock
    answered: asyncio.Future[Any] = field(default_factory=asyncio.Future)  # its ElicitResult
    by: str | None = None  # who answered: the person, or the operator over HTTP

    def describe(self) -> dict[str, Any]:
        """What a program reading or receiving the question needs to answer it."""
        return {
            "id": self.id,
            "conversation_key": self.conversation_key,
            "user_id": self.user_id,
            "server": self.server,
            "mode": self.mode,
            "message": self.message,
            "fields": self.fields,
            "required": self.required,
            "url": self.url,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class HttpAnswer:
    status: Literal["answered", "unknown", "closed", "invalid"]
    text: str


class Elicitations:
    def __init__(self, state: AgentState, clock: Clock = SYSTEM_CLOCK):
        self.state = state
        self.clock = clock
        self.waiting: dict[str, Asked] = {}
        self.closed: OrderedDict[str, str] = OrderedDict()  # question id -> how it ended

    async def elicit(
        self, server: str, asker: ToolCall | None, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        form = params.requested_schema if params.mode == "form" else {}
        fields = dict(form.get("properties") or {})
        base = {"server": server, "user": asker.user_id if asker else None, "mode": params.mode}
        key = asker.conversation_key if asker is not None else None
        if asker is None:
            await self._audit("elicitation_refused", key, {**base, "reason": "not one call in flight"})
            return types.ElicitResult(action="cancel")
        timeout = self.state.spec.tools.approval_timeout_s
        asked = Asked(
            secrets.token_hex(3),
            server,
            asker.conversation_key,
            asker.user_id,
            fields,
            params.mode,
            params.message,
            params.url if params.mode == "url" else None,
            list(form.get("required") or []),
            self.clock.time() + timeout,
        )
        text = _question(asked, timeout)
        self.waiting[asked.id] = asked  # before the question is out: the answer can come at once
        try:
            outbox = self.state.resources.outbox
            via = await outbox.ask(self.state.name, asked.conversation_key, text, asked.describe())
            if via is None and asker.on_progress is not None:
                asker.on_progress(text)  # a streamed reply (the webhook's, a channel's, the REPL's) shows it
                via = "stream"
            elif via is None and asked.conversation_key.startswith(f"{LISTED_CHANNEL}:"):
                via = "http"  # the caller reads it at GET /agents/{agent}/questions
            elif via is None:
                reason = "the conversation cannot be reached"
                await self._audit("elicitation_refused", key, {**base, "reason": reason})
                return types.ElicitResult(action="cancel")
            data = {**base, "id": asked.id, "fields": sorted(fields), "via": via}
            await self._audit("elicitation_requested", key, data)
            expiry: asyncio.Future[Any] = asyncio.ensure_future(self.clock.sleep_until(asked.expires_at))
            try:
                await asyncio.wait({asked.answered, expiry}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                expiry.cancel()
        finally:
            self.waiting.pop(asked.id, None)
        if not asked.answered.done():
            asked.answered.cancel()
            self._close(asked.id, "expired")
            await self._audit("elicitation_expired", key, data)
            return types.ElicitResult(action="cancel")
        result = asked.answered.result()
        action = "elicitation_answered" if result.action == "accept" else "elicitation_declined"
        await self._audit(action, key, {**data, "by": asked.by})
        return result

    def listing(self) -> list[dict[str, Any]]:
        """The questions waiting, oldest first (GET /agents/{agent}/questions)."""
        waiting = [a for a in self.waiting.values() if not a.answered.done()]
        return [a.describe() for a in sorted(waiting, key=lambda a: a.expires_at)]

    def answer_http(self, asked_id: str, action: str, content: Any) -> HttpAnswer:
        """An answer over HTTP, by whoever holds the daemon's token (as the operator answers an
        approval): `accept` with content that fits the form exactly, or `decline`."""
        asked = self.waiting.get(asked_id)
        if asked is None or asked.answered.done():
            if asked is not None or asked_id in self.closed:
                ended = self.closed.get(asked_id, "answered")
                return HttpAnswer("closed", f"question [{asked_id}] was already {ended}")
            return HttpAnswer("unknown", f"no question [{asked_id}] waits in agent {self.state.name!r}")
        if action == "decline":
            self._settle(asked, types.ElicitResult(action="decline"), "http")
            return HttpAnswer("answered", f"Declined [{asked.id}]; {asked.server} is told so.")
        try:
            values = checked_content(asked.fields, asked.required, content if asked.fields else {})
        except ValueError as e:
            return HttpAnswer("invalid", f"[{asked.id}]: {e}")
        self._settle(asked, types.ElicitResult(action="accept", content=values or None), "http")
        return HttpAnswer("answered", f"Sent the answer to {asked.server} [{asked.id}].")

    async def answer(self, event: InboundEvent) -> Reply:
        """`/answer <id> ...` or `/decline <id>` from the person who was asked."""
        match = _ANSWER_RE.match(event.text.strip())
        assert match is not None
        verb, asked_id, text = match.group(1), (match.group(2) or "").lower(), (match.group(3) or "").strip()
        key = event.conversation_key
        asked = self.waiting.get(asked_id)
        theirs = asked is not None and (asked.conversation_key, asked.user_id) == (key, event.user_id)
        if asked is not None and not theirs:
            who = {"question": asked.id, "server": asked.server, "by": event.user_id, "reason": "not asked"}
            record = AuditRecord("permission", "denied", key, None, who)
            await self.state.store.write(AppendAudit(self.state.name, [record], time.time()))
        if asked is None or not theirs or asked.answered.done():
            mine = [a.id for a in self.waiting.values() if a.conversation_key == key]
            listed = ", ".join(mine) or "none in this conversation"
            return Reply(
                text=f"No question [{asked_id}] waits for you. Waiting: {listed}.", conversation_key=key
            )
        if verb == "decline":
            self._settle(asked, types.ElicitResult(action="decline"), event.user_id)
            return Reply(text=f"Declined [{asked.id}]; {asked.server} is told so.", conversation_key=key)
        try:
            content = typed_content(asked.fields, text)
        except ValueError as e:
            return Reply(text=f"[{asked.id}]: {e}", conversation_key=key)
        self._settle(asked, types.ElicitResult(action="accept", content=content or None), event.user_id)
        return Reply(text=f"Sent your answer to {asked.server} [{asked.id}].", conversation_key=key)

    def _settle(self, asked: Asked, result: types.ElicitResult, by: str | None) -> None:
        asked.by = by
        asked.answered.set_result(result)
        self._close(asked.id, "answered" if result.action == "accept" else "declined")

    def _close(self, asked_id: str, how: str) -> None:
        self.closed[asked_id] = how
        while len(self.closed) > CLOSED_KEPT:
            self.closed.popitem(last=False)

    async def _audit(self, action: str, key: str | None, data: dict[str, Any]) -> None:
        record = AuditRecord("tool", action, key, None, data)
        await self.state.store.write(AppendAudit(self.state.name, [record], time.time()))


def _question(asked: Asked, timeout: float) -> str:
    minutes = max(1, round(timeout / 60))
    if asked.mode == "url":
        how = f"Open {asked.url} , then answer /answer {asked.id} done"
    elif len(asked.fields) == 1:
        how = f"Answer /answer {asked.id} <{next(iter(asked.fields))}>"
    else:
        names = ", ".join(f"{n} ({f.get('type', 'string')})" for n, f in asked.fields.items())
        how = f"Answer /answer {asked.id} {{JSON with: {names}}}"
    return (
        f"The tool server {asked.server} asks [{asked.id}]: {asked.message}\n"
        f"{how}, or /decline {asked.id} (only you can; expires in {minutes} min)."
    )
