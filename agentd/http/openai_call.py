"""An OpenAI Chat Completions request, read: whose conversation, what is new, what came before, what
the caller adds; and what agentd refuses of it (with a reason, before anything runs).

The rules are openai_api.py's (its module docstring): a named conversation (header, else `user`)
takes only the last message as the new turn; a stateless one takes the messages sent as the whole
conversation. Text that is not Unicode (a lone surrogate, which JSON can spell) is refused here: it
could be neither stored nor sent on to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentd.events import USER_ID_FORM, USER_ID_PATTERN, Attachment, is_user_id
from agentd.http.bodies import MAX_TEXT
from agentd.http.errors import ApiError
from agentd.http.idempotency import KEY_DOC, KEY_PATTERN
from agentd.http.media_in import content_parts
from agentd.messages import Message

CHANNEL = "openai"
CONVERSATION_HEADER = "X-Agentd-Conversation"
STATELESS_KEY = f"{CHANNEL}:(stateless)"  # "(" never appears in a conversation name: no named one collides
NAME_CHARS = 128


class TextPartIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPartIn] | None = None
    tool_calls: list[Any] | None = None


class StreamOptionsIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = None


class ChatCompletionIn(BaseModel):
    """A Chat Completions request; options not listed here are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(description="the agent's name")
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptionsIn | None = None
    user: str | None = Field(
        default=None,
        json_schema_extra={"pattern": USER_ID_PATTERN},
        description=f"names the conversation (openai:<user>) unless the header does; the speaker: {USER_ID_FORM}",
    )
    n: int | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    message_id: str | None = Field(
        default=None, pattern=KEY_PATTERN, description=f"as the Idempotency-Key: {KEY_DOC}"
    )


class Call:
    """One request read: whose conversation, what is new, what came before, what the caller adds."""

    def __init__(self, body: ChatCompletionIn, header: str | None, allowed_urls: Sequence[str] = ()):
        """`allowed_urls`: where an `image_url` may be fetched from (the agent's media.allowed_urls)."""
        _refuse_what_agentd_cannot_do(body)
        *earlier, last = body.messages
        self.instructions = "\n\n".join(
            _text(m, i) for i, m in enumerate(body.messages) if m.role in ("system", "developer")
        )
        if last.role != "user":
            raise ApiError(
                400, f"the last message must be the user's new turn, not {last.role!r}", param="messages"
            )
        self.attachments: tuple[Attachment, ...] = ()
        if isinstance(last.content, list):  # content parts: text, and images or audio (media_in)
            parts = [p.model_dump(exclude_none=True) for p in last.content]
            text, self.attachments = content_parts(parts, len(body.messages) - 1, allowed_urls)
            self.text = _encodable(text, f"messages[{len(body.messages) - 1}]")
        else:
            self.text = _text(last, len(body.messages) - 1)
        if not self.text.strip() and not self.attachments:
            raise ApiError(400, "the last user message has no text", param="messages")
        if len(self.text) > MAX_TEXT:
            raise ApiError(
                413, f"the last user message is {len(self.text)} characters; the limit is {MAX_TEXT}"
            )
        self.user = _name(body.user, "user")
        if self.user is not None and not is_user_id(self.user):  # the speaker too: the people routes' rule
            raise ApiError(400, f"user: not a user id ({USER_ID_FORM})", param="user")
        named = _name(header, CONVERSATION_HEADER) or self.user
        self.key = f"{CHANNEL}:{named}" if named else STATELESS_KEY
        # Stateless: the caller's conversation so far, without its system messages (they are instructions).
        self.earlier: list[Message] | None = None
        if named is None:
            self.earlier = [
                _message(m, i) for i, m in enumerate(earlier) if m.role not in ("system", "developer")
            ]


def _refuse_what_agentd_cannot_do(body: ChatCompletionIn) -> None:
    if body.n not in (None, 1):
        raise ApiError(400, "n: an agent gives one answer per call; leave n out or set it to 1", param="n")
    if body.tools or body.functions:
        raise ApiError(
            400,
            "tools: an agent calls its own tools (its agent file); client-side tools are not supported",
            param="tools",
        )
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        raise ApiError(400, f"response_format {kind!r} is not supported; only text", param="response_format")


def _text(message: ChatMessageIn, index: int) -> str:
    content = message.content
    if content is None:
        if message.tool_calls:
            raise ApiError(
                400, f"messages[{index}]: tool calls from the client are not supported", param="messages"
            )
        raise ApiError(400, f"messages[{index}]: content is missing", param="messages")
    if isinstance(content, str):
        return _encodable(content, f"messages[{index}]")
    texts = []
    for part in content:
        if part.type in ("image_url", "input_audio"):
            # an earlier message's file (a stateless call sends the whole conversation each time): the
            # model is told it was there; only the new turn's files are taken
            texts.append(f"[{'an image' if part.type == 'image_url' else 'audio'} sent earlier]")
            continue
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{index}]: a {part.type!r} content part; agents take text, image_url and input_audio",
                param="messages",
            )
        texts.append(part.text)
    return _encodable("".join(texts), f"messages[{index}]")


def _message(message: ChatMessageIn, index: int) -> Message:
    """An earlier message of a stateless call, as agentd's."""
    if message.role == "tool" or message.tool_calls:
        raise ApiError(
            400, f"messages[{index}]: tool messages from the client are not supported", param="messages"
        )
    text = _text(message, index)
    return Message.user(text) if message.role == "user" else Message.assistant(text)


def _name(value: str | None, what: str) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > NAME_CHARS or any(c.isspace() for c in value):
        raise ApiError(400, f"{what}: 1-{NAME_CHARS} characters without spaces (it names the conversation)")
    return _encodable(value, what, param="user" if what == "user" else None)


def _encodable(text: str, what: str, param: str | None = "messages") -> str:
    """Text that is Unicode: a lone surrogate (JSON's `\\ud800`) can be neither stored nor sent on, so
    it is refused here, before anything runs, rather than failing half-way."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"{what}: not Unicode text ({e.reason} at {e.start})", param=param) from None
    return text
