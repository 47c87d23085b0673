"""An MCP server asking the person for input mid-call (`elicitation/create`), through the approval channel.

The question goes to the person whose message the call serves, in their
conversation: posted there when its channel can post (Slack, Telegram), else
shown by the streamed reply (as its progress) when the reply is streamed. They answer out of band,
as they answer an approval (never queued behind the run that waits):
`/answer <id> <text or JSON>` or `/decline <id>`; only they can. A form's
answer is one value when the form has one field, else a JSON object of its
fields, each taken to the field's type; a URL request's answer is any text
once they have been there. Unanswered within `tools.approval_timeout_s` (and
the call's own `max_s`, which the wait holds open) it expires, and the server
is told `cancel`. Each step is an audit event like an approval's: `{kind:
tool, action: elicitation_requested | elicitation_answered |
elicitation_declined | elicitation_expired | elicitation_refused, server,
user, id, fields}`; what the person answered is never written.

A request that cannot be put down to one conversation (several calls in flight
on that server, or none), or whose conversation agentd cannot reach, is
refused (`cancel`) and audited as such. Waiting questions live in memory: the
server's request dies with the connection anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.engine.state import AgentState
from agentd.events import InboundEvent, Reply
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit
from agentd.tools.base import ToolCall

_ANSWER_RE = re.compile(r"^/(answer|decline)(?:@\S+)?(?:\s+\[?([0-9a-fA-F]{6})\]?)?(?:\s+(.*))?$", re.S)


def is_elicitation_command(text: str) -> bool:
    return text.startswith("/") and _ANSWER_RE.match(text.strip()) is not None


@dataclass
class Asked:
    id: str
    server: str
    conversation_key: str
    user_id: str | None
    fields: dict[str, Any]  # the form's properties (empty for a URL request)
    answered: asyncio.Future[Any] = field(default_factory=asyncio.Future)  # its ElicitResult


class Elicitations:
    def __init__(self, state: AgentState, clock: Clock = SYSTEM_CLOCK):
        self.state = state
        self.clock = clock
        self.waiting: dict[str, Asked] = {}

    async def elicit(
        self, server: str, asker: ToolCall | None, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        fields = dict(params.requested_schema.get("properties") or {}) if params.mode == "form" else {}
        base = {"server": server, "user": asker.user_id if asker else None, "mode": params.mode}
        key = asker.conversation_key if asker is not None else None
        if asker is None:
            await self._audit("elicitation_refused", key, {**base, "reason": "not one call in flight"})
            return types.ElicitResult(action="cancel")
        asked = Asked(secrets.token_hex(3), server, asker.conversation_key, asker.user_id, fields)
        timeout = self.state.spec.tools.approval_timeout_s
        text = _question(asked, params, timeout)
        data = {**base, "id": asked.id, "fields": sorted(fields)}
        self.waiting[asked.id] = asked  # before the question is out: the answer can come at once
        try:
            posted = await self.state.resources.outbox.post(self.state.name, asked.conversation_key, text)
            if not posted and asker.on_progress is not None:
                asker.on_progress(text)  # a streamed reply (the webhook's, a channel's) shows it instead
            elif not posted:
                reason = "the conversation cannot be reached"
                await self._audit("elicitation_refused", key, {**base, "reason": reason})
                return types.ElicitResult(action="cancel")
            await self._audit("elicitation_requested", key, data)
            expiry: asyncio.Future[Any] = asyncio.ensure_future(
                self.clock.sleep_until(self.clock.time() + timeout)
            )
            try:
                await asyncio.wait({asked.answered, expiry}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                expiry.cancel()
        finally:
            self.waiting.pop(asked.id, None)
        if not asked.answered.done():
            asked.answered.cancel()
            await self._audit("elicitation_expired", key, data)
            return types.ElicitResult(action="cancel")
        result = asked.answered.result()
        action = "elicitation_answered" if result.action == "accept" else "elicitation_declined"
        await self._audit(action, key, data)
        return result

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
            asked.answered.set_result(types.ElicitResult(action="decline"))
            return Reply(text=f"Declined [{asked.id}]; {asked.server} is told so.", conversation_key=key)
        try:
            content = _content(asked.fields, text)
        except ValueError as e:
            return Reply(text=f"[{asked.id}]: {e}", conversation_key=key)
        asked.answered.set_result(types.ElicitResult(action="accept", content=content or None))
        return Reply(text=f"Sent your answer to {asked.server} [{asked.id}].", conversation_key=key)

    async def _audit(self, action: str, key: str | None, data: dict[str, Any]) -> None:
        record = AuditRecord("tool", action, key, None, data)
        await self.state.store.write(AppendAudit(self.state.name, [record], time.time()))


def _question(asked: Asked, params: types.ElicitRequestParams, timeout: float) -> str:
    minutes = max(1, round(timeout / 60))
    if params.mode == "url":
        how = f"Open {params.url} , then answer /answer {asked.id} done"
    elif len(asked.fields) == 1:
        how = f"Answer /answer {asked.id} <{next(iter(asked.fields))}>"
    else:
        names = ", ".join(f"{n} ({f.get('type', 'string')})" for n, f in asked.fields.items())
        how = f"Answer /answer {asked.id} {{JSON with: {names}}}"
    return (
        f"The tool server {asked.server} asks [{asked.id}]: {params.message}\n"
        f"{how}, or /decline {asked.id} (only you can; expires in {minutes} min)."
    )


def _content(fields: dict[str, Any], text: str) -> dict[str, Any]:
    if not fields:
        return {}
    values: Any = None
    if len(fields) == 1 and not text.startswith("{"):
        values = {next(iter(fields)): text}
    else:
        with contextlib.suppress(json.JSONDecodeError):
            values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError(f"answer with a JSON object of: {', '.join(fields)}")
    return {name: _typed(fields[name], value, name) for name, value in values.items() if name in fields}


def _typed(schema: dict[str, Any], value: Any, name: str) -> Any:
    kind = schema.get("type", "string")
    if kind == "boolean" and isinstance(value, str):
        if value.lower() not in ("yes", "no", "true", "false"):
            raise ValueError(f"{name}: expected yes or no, got {value!r}")
        return value.lower() in ("yes", "true")
    if kind in ("integer", "number") and isinstance(value, str):
        try:
            return int(value) if kind == "integer" else float(value)
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {value!r}") from None
    return value
