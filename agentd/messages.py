"""Messages are data: a role and kind-tagged parts, stored as JSON through one adapter.

Provider adapters translate these to and from their wire formats and refuse a
part they cannot carry instead of dropping it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextPart(_Part):
    kind: Literal["text"] = "text"
    text: str


class ToolCallPart(_Part):
    kind: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


MediaKind = Literal["image", "audio", "document", "file"]


class MediaPart(_Part):
    """A file that came with a person's message, by reference: its bytes are in the agent's store under
    `sha256` (agentd.engine.media), never in the transcript. `text` is what stands for it where the
    file itself is not sent: an image's description, a voice note's transcript, a document's text
    (`text_is` says which); `note` what the person was told about it (refused, not understood)."""

    kind: Literal["media"] = "media"
    sha256: str
    media: MediaKind
    mime_type: str
    size: int
    filename: str | None = None
    text: str | None = None
    text_is: Literal["description", "transcript", "content"] | None = None
    note: str | None = None

    def stand_in(self) -> str:
        """The file as one line of text, for a model that is not sent the file (and for people)."""
        name = f" {self.filename}" if self.filename else ""
        head = f"[{self.media}{name} ({self.mime_type}, {human_size(self.size)})"
        if self.note:
            head += f"; {self.note}"
        if self.text:
            return f"{head}; {self.text_is or 'text'}: {self.text}]"
        return head + "]"


class ToolResultPart(_Part):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    # the files the tool returned, by reference (agentd.engine.tool_files), as a person's files are;
    # left out of the JSON when there are none, so a result without files is stored as before
    media: tuple[MediaPart, ...] = Field(default=(), exclude_if=lambda v: not v)


def human_size(n: int) -> str:
    for unit, size in (("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


Part = Annotated[TextPart | ToolCallPart | ToolResultPart | MediaPart, Field(discriminator="kind")]

Role = Literal["user", "assistant", "tool"]


class Message(BaseModel):
    """One message of a conversation.

    `user` messages carry text from a person (`user_id` says who); `assistant`
    messages carry text and/or tool calls; `tool` messages carry the results
    of the tool calls of the assistant message just before them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    parts: tuple[Part, ...]
    user_id: str | None = None
    # when the person sent it (epoch seconds), if the channel said; memories of it carry this time
    sent_at: float | None = None
    # an assistant reply cut short by /stop or max_run_s: only what the person was shown of it
    stopped: bool | None = None

    @classmethod
    def user(cls, text: str, user_id: str | None = None, sent_at: float | None = None) -> Message:
        return cls(role="user", parts=(TextPart(text=text),), user_id=user_id, sent_at=sent_at)

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", parts=(TextPart(text=text),))

    @property
    def text(self) -> str:
        """The text parts joined; empty when there are none."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def readable(self) -> str:
        """The text with each file's stand-in after it: what memory keeps of a message (a receipt's
        description, a voice note's transcript), so it can be recalled later."""
        media = [p.stand_in() for p in self.parts if isinstance(p, MediaPart)]
        return "\n".join([self.text, *media]) if media else self.text

    @property
    def media(self) -> list[MediaPart]:
        return [p for p in self.parts if isinstance(p, MediaPart)]

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    def char_count(self) -> int:
        """Characters the model will read for this message: the base of token estimates."""
        n = 0
        for p in self.parts:
            if isinstance(p, TextPart):
                n += len(p.text)
            elif isinstance(p, ToolCallPart):
                n += len(p.name) + len(str(p.arguments))
            elif isinstance(p, MediaPart):
                n += len(p.stand_in())
            else:
                n += len(p.content) + len(p.name) + sum(len(m.stand_in()) for m in p.media)
        return n + 4


MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)


def dump_message(message: Message) -> str:
    return MESSAGE_ADAPTER.dump_json(message, exclude_none=True).decode()


def load_message(raw: str | bytes) -> Message:
    return MESSAGE_ADAPTER.validate_json(raw)


_MESSAGES_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def load_messages(raws: Sequence[str]) -> list[Message]:
    """Many stored messages at once: validated as one JSON array, which spares pydantic's per-call
    setup (a 10,000-message thread loads ~15 % faster than one `load_message` per row)."""
    if not raws:
        return []
    return _MESSAGES_ADAPTER.validate_json("[" + ",".join(raws) + "]")


CHARS_PER_TOKEN = 4  # the estimate used wherever tokens are counted without a tokenizer


def estimate_tokens(chars: int) -> int:
    """The estimate used when a provider reports no usage: about four characters a token."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


class MessageSequence(Sequence[Message]):
    """Messages as one read-only sequence without copying: `head[:head_len]` followed by `tail`.

    A turn's prompt is the replayed history plus the turn's new messages;
    copying a 10,000-message history into a new list on every model call is
    what made per-turn cost grow with the thread. `head` is a list that only
    ever grows at the end (a hot thread), so fixing its length here makes this
    a stable snapshot. Items of `head` may be anything with a `.message`
    attribute (stored messages) or Messages themselves.
    """

    __slots__ = ("_head", "_head_len", "_tail")

    def __init__(self, head: Sequence[Any], head_len: int | None = None, tail: Sequence[Message] = ()):
        self._head = head
        self._head_len = len(head) if head_len is None else head_len
        self._tail = tuple(tail)

    def __len__(self) -> int:
        return self._head_len + len(self._tail)

    def _item(self, i: int) -> Message:
        if i < self._head_len:
            item = self._head[i]
            return item if isinstance(item, Message) else item.message
        return self._tail[i - self._head_len]

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        n = len(self)
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(n))]
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("message index out of range")
        return self._item(index)

    def __iter__(self) -> Iterator[Message]:
        for i in range(self._head_len):
            item = self._head[i]
            yield item if isinstance(item, Message) else item.message
        yield from self._tail

    def extended(self, more: Sequence[Message]) -> MessageSequence:
        return MessageSequence(self._head, self._head_len, (*self._tail, *more))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"MessageSequence({list(self)!r})"


def render_message(message: Message, tool_result_chars: int | None = None) -> str:
    """One message as one readable line: who spoke, text, `-> tool(args)` calls, `<- tool: result`.

    The one rendering of messages as text: memory models (compaction, summaries,
    folds, extraction) read it, and so do people (`agentd inspect`). Tool
    results are cut to `tool_result_chars` when given.
    """
    who = message.role + (f" ({message.user_id})" if message.user_id else "")
    pieces = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ToolCallPart):
            pieces.append(f"-> {part.name}({json.dumps(part.arguments, ensure_ascii=False)})")
        elif isinstance(part, MediaPart):
            pieces.append(part.stand_in())
        else:
            content = part.content
            if tool_result_chars is not None and len(content) > tool_result_chars:
                content = content[:tool_result_chars] + f"… ({len(part.content)} characters in all)"
            files = "".join(f" {m.stand_in()}" for m in part.media)
            pieces.append(f"<- {part.name}{' (error)' if part.is_error else ''}: {content}{files}")
    return f"{who}: " + " ".join(pieces)


def render_transcript(messages: Iterable[Message], tool_result_chars: int | None = None) -> str:
    return "\n".join(render_message(m, tool_result_chars) for m in messages)
