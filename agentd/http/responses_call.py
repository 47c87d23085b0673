"""An OpenAI Responses API request, read: whose conversation, what is new, what came before, and what
agentd refuses of it (with a reason, before anything runs).

Which conversation a response belongs to, in this order:
- `previous_response_id`: the conversation of that response (its id says which, see `ResponseId`);
- the `X-Agentd-Conversation` header, else `user`: `openai:<name>`, the same conversation the Chat
  Completions endpoint names so (a client may use both);
- neither, and the input is a new message (a string, or user messages only) with `store` not false:
  a new conversation of its own, `openai:resp-<id>`, which the response's id continues;
- neither, and the input carries the conversation so far (an assistant message in it, as the Agents
  SDK sends when it keeps the history itself), or `store: false`: stateless, as a Chat Completions call
  without a name: the input is the whole conversation and nothing is kept but the run.
In a named conversation only the last user message is the new turn (agentd holds the history), as in
every channel; its images, files and audio (response_parts.py) are the turn's attachments, an earlier
message's are only said to have been there. `instructions` (and system or developer messages) are added to the agent's purpose for
this call only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentd.events import USER_ID_FORM, USER_ID_PATTERN, Attachment, is_conversation_key, is_user_id
from agentd.http.bodies import MAX_TEXT
from agentd.http.errors import ApiError
from agentd.http.openai_call import CHANNEL, STATELESS_KEY, encodable, name_of
from agentd.http.response_parts import earlier_text, response_parts
from agentd.messages import Message

PREFIX = "resp_"
# tools the client runs itself: its function calls and their outputs cannot be in an agent's conversation
CLIENT_TOOL_ITEMS = ("function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output")


class InputPartIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class InputItemIn(BaseModel):
    """A message of the input (EasyInputMessage or an output message sent back), or another item."""

    model_config = ConfigDict(extra="allow")

    type: str | None = Field(default=None, description='"message" (the default), or another item type')
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[InputPartIn] | None = None


class TextFormatIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = "text"


class TextConfigIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: TextFormatIn | None = None


class ResponseCreateIn(BaseModel):
    """A Responses API request; options not listed here are accepted and ignored (x-agentd-ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="the agent's name")
    input: str | list[InputItemIn] = Field(description="the new message, or the conversation so far")
    instructions: str | None = None
    previous_response_id: str | None = Field(
        default=None, description="continue that response's conversation"
    )
    store: bool | None = Field(default=None, description="false: keep nothing of the conversation")
    stream: bool = False
    user: str | None = Field(
        default=None,
        json_schema_extra={"pattern": USER_ID_PATTERN},
        description=f"names the conversation (openai:<user>) unless the header does; the speaker: {USER_ID_FORM}",
    )
    metadata: dict[str, str] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    tools: list[Any] | None = None
    tool_choice: Any = None
    text: TextConfigIn | None = None
    conversation: Any = None
    background: bool | None = None
    prompt: Any = None
    top_logprobs: int | None = None


class ResponseId:
    """A response's id says which agent, conversation and delivery it was, so `previous_response_id`
    continues it and `GET /v1/responses/{id}` finds it without a table of their own: `resp_` and the
    three, as base64url JSON. A stateless response's id names no conversation (nothing to continue)."""

    def __init__(self, agent: str, key: str | None, event_id: str):
        self.agent, self.key, self.event_id = agent, key, event_id

    def __str__(self) -> str:
        if self.key is None:
            return PREFIX + self.event_id
        raw = json.dumps([self.agent, self.key, self.event_id], separators=(",", ":")).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def read(cls, text: str) -> ResponseId | None:
        """The id read back; None for one agentd did not make, or a stateless one."""
        if not text.startswith(PREFIX):
            return None
        encoded = text[len(PREFIX) :]
        try:
            agent, key, event_id = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
            return None
        if not all(isinstance(v, str) for v in (agent, key, event_id)):
            return None
        if not is_conversation_key(key) or not key.startswith(f"{CHANNEL}:"):
            return None  # only the OpenAI endpoint's conversations are reached this way
        return cls(agent, key, event_id)


def not_found(response_id: str, param: str | None = None) -> ApiError:
    shown = response_id if len(response_id) <= 200 else response_id[:200] + "…"
    return ApiError(
        404 if param is None else 400,
        f"Response with id {shown!r} not found (a response made with store false, or by another server, "
        "cannot be continued or read back)",
        code="previous_response_not_found" if param else "not_found",
        param=param,
    )


class ResponsesCall:
    """One request read (the module docstring's rules)."""

    def __init__(
        self,
        body: ResponseCreateIn,
        header: str | None,
        idempotency_key: str | None = None,
        allowed_urls: Sequence[str] = (),
    ):
        """`allowed_urls`: where an image or a file may be fetched from (the agent's media.allowed_urls)."""
        _refuse_what_agentd_cannot_do(body)
        items = [InputItemIn(role="user", content=body.input)] if isinstance(body.input, str) else body.input
        if not items:
            raise ApiError(400, "input: no message", param="input")
        messages = [_message(item, i) for i, item in enumerate(items)]
        said = [(r, t, i) for i, (r, t) in enumerate(messages) if r not in ("system", "developer")]
        self.instructions = "\n\n".join(
            [
                *([body.instructions] if body.instructions else []),
                *(t for r, t in messages if r in ("system", "developer")),
            ]
        )
        if not said or said[-1][0] != "user":
            raise ApiError(400, "input: the last message must be the user's new turn", param="input")
        _, self.text, last = said[-1]
        self.attachments: tuple[Attachment, ...] = ()
        content = items[last].content
        if isinstance(content, list):  # parts: text, and images, files or audio (response_parts.py)
            parts = [p.model_dump(exclude_none=True) for p in content]
            text, self.attachments = response_parts(parts, f"input[{last}]", allowed_urls)
            self.text = encodable(text, f"input[{last}]", param="input")
        if not self.text.strip() and not self.attachments:
            raise ApiError(400, "input: the last user message has no text", param="input")
        if len(self.text) > MAX_TEXT:
            raise ApiError(
                413, f"the last user message is {len(self.text)} characters; the limit is {MAX_TEXT}"
            )
        self.user = name_of(body.user, "user")
        if self.user is not None and not is_user_id(self.user):
            raise ApiError(400, f"user: not a user id ({USER_ID_FORM})", param="user")
        # the delivery's id: the Idempotency-Key when there is one, so a retry is the same delivery of
        # the same new conversation (named after the key), and the same response id
        self.event_id = idempotency_key or uuid.uuid4().hex
        fresh = (
            uuid.uuid4().hex
            if idempotency_key is None
            else hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]
        )
        self.earlier: list[Message] | None = None
        self.previous = body.previous_response_id
        if self.previous is not None:
            continued = ResponseId.read(self.previous)
            if continued is None:
                raise not_found(self.previous, param="previous_response_id")
            self.agent_of_previous: str | None = continued.agent
            self.key = continued.key or STATELESS_KEY
            return
        self.agent_of_previous = None
        named = name_of(header, "X-Agentd-Conversation") or self.user
        history = any(role == "assistant" for role, _, _ in said)
        if named:
            self.key = f"{CHANNEL}:{named}"
        elif history or body.store is False:
            self.key = STATELESS_KEY
            self.earlier = [Message.user(t) if r == "user" else Message.assistant(t) for r, t, _ in said[:-1]]
        else:
            self.key = f"{CHANNEL}:resp-{fresh}"

    @property
    def stateless(self) -> bool:
        return self.earlier is not None


def _refuse_what_agentd_cannot_do(body: ResponseCreateIn) -> None:
    if body.tools:
        raise ApiError(
            400,
            "tools: an agent calls its own tools (its agent file); client-side tools are not supported",
            param="tools",
        )
    choice = body.tool_choice
    if choice not in (None, "auto", "none"):
        raise ApiError(400, "tool_choice: an agent chooses its own tools; leave it out", param="tool_choice")
    kind = body.text.format.type if body.text and body.text.format else "text"
    if kind != "text":
        raise ApiError(400, f"text.format {kind!r} is not supported; only text", param="text.format")
    if body.conversation is not None:
        raise ApiError(
            400,
            "conversation: the Conversations API is not supported; continue with previous_response_id, or "
            "name the conversation with the X-Agentd-Conversation header",
            param="conversation",
        )
    if body.background:
        raise ApiError(400, "background: responses run in the foreground; stream instead", param="background")
    if body.prompt is not None:
        raise ApiError(400, "prompt: prompt templates are not supported; send the input", param="prompt")
    if body.top_logprobs is not None:
        raise ApiError(
            400, "top_logprobs: agents give no log probabilities; leave it out", param="top_logprobs"
        )


def _message(item: InputItemIn, index: int) -> tuple[str, str]:
    """(role, text) of an input item; anything but a text message is refused, naming it."""
    where = f"input[{index}]"
    if item.type in CLIENT_TOOL_ITEMS:
        raise ApiError(
            400, f"{where}: a {item.type} item; client-side tools are not supported", param="input"
        )
    if item.type not in (None, "message") or item.role is None:
        raise ApiError(
            400, f"{where}: a {item.type or 'role-less'!r} item; agents take text messages", param="input"
        )
    content = item.content
    if content is None:
        raise ApiError(400, f"{where}: content is missing", param="input")
    if isinstance(content, str):
        return item.role, encodable(content, where, param="input")
    text = earlier_text([p.model_dump(exclude_none=True) for p in content], where)
    return item.role, encodable(text, where, param="input")
