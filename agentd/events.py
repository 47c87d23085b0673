"""What channels and the engine exchange: an inbound event, a reply, and the host a channel runs in.

Channels know only this module: they turn a platform message into an
`InboundEvent`, hand it to `ChannelHost.dispatch`, and send the `Reply` back
(optionally showing it as it is written, through a `ReplySink`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

# A conversation key is "<channel>:<id...>", e.g. "webhook:ticket-7",
# "discord:1234", "slack:C01:1700000000.0001", "repl:local".
# Not whitespace, in every regex engine's sense (Python's \s and ECMAScript's differ: \x1c-\x1f and \x85
# are whitespace to Python, \ufeff to ECMAScript), so the patterns the OpenAPI publishes mean the same
# to a client as here.
NOT_SPACE = r"[^\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
CONVERSATION_KEY_PATTERN = rf"^[a-z][a-z0-9_]*:{NOT_SPACE}{{1,256}}$"
_KEY_RE = re.compile(CONVERSATION_KEY_PATTERN)
CONVERSATION_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def is_conversation_key(value: str) -> bool:
    return bool(_KEY_RE.match(value))


# A user id: one rule at every intake (the webhook's user_id, the OpenAI endpoint's `user`, the
# channels) and every people route (export, erase, episodes; `agentd person`), so every id that is
# accepted can be exported and erased while the daemon runs: 1-128 characters, none of them
# whitespace (in Python's and ECMAScript's sense, as NOT_SPACE), a control character, or `/` (a URL
# path segment cannot carry it).
USER_ID_PATTERN = r"^[^\x00-\x20\x7f-\xa0/\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]{1,128}$"
USER_ID_FORM = "1-128 characters, none of them a space, a control character or '/'"
_USER_ID_RE = re.compile(USER_ID_PATTERN)


def is_user_id(value: str) -> bool:
    return _USER_ID_RE.fullmatch(value) is not None  # fullmatch: `$` would let a final \n through


# The commands every channel understands, name -> what it does: /help lists them, a channel with a
# command menu (Telegram's) offers them, the engine runs them (agentd/engine/commands.py, and
# agentd/engine/approval_commands.py for /approve and /deny). tests/test_commands.py checks that the
# engine runs exactly these.
COMMANDS: Mapping[str, str] = MappingProxyType(
    {
        "compact": "summarise older turns now, keeping the last two verbatim",
        "new": "archive this conversation's thread and start a fresh one",
        "reset": "delete this conversation's transcript",
        "status": "show the agent, model, context size, totals and approvals waiting",
        "stop": "stop the run under way now (the model call and tool calls in flight)",
        "model": "/model shows this conversation's model; /model <name> switches among models_allowed",
        "approve": "/approve <id>: let a tool call that waits for approval run",
        "deny": "/deny <id>: refuse a tool call that waits for approval",
        "link": "/link: a one-time code; /link <code> from your other account makes the two one person",
        "unlink": "take this account out of the person it is linked into",
        "whoami": "show the accounts linked into you",
        "answer": "/answer <id> <text>: answer a tool server's question",
        "decline": "/decline <id>: decline to answer a tool server's question",
        "usage": "your own tokens and spend today and this month, and your limits",
        "jobs": "list this conversation's jobs; /jobs cancel|pause|resume <id>",
        "help": "list these commands",
    }
)


class MediaTooLarge(Exception):
    """An attachment's download went past the byte limit it was given (the limit is `limit`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a person's message (a photo, a document, a voice note), as the channel got
    it. The bytes are `data` when the channel already holds them (a webhook upload, a data URL), else
    `download(max_bytes)` fetches them the platform's way (a bot token, Telegram's getFile) and raises
    MediaTooLarge past `max_bytes`: the engine decides the limits, the channel knows the wire.
    `kind` is the channel's reading (image | audio | document | file); `size` what the platform
    declared, when it did (checked before downloading)."""

    kind: str
    mime_type: str | None = None
    filename: str | None = None
    size: int | None = None
    data: bytes | None = None
    download: Callable[[int], Awaitable[bytes]] | None = None


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file a reply carries (an image a tool made, a document), sent as an attachment where the
    channel can."""

    filename: str
    mime_type: str
    data: bytes
    sha256: str | None = (
        None  # the stored file's hash, when it is one (a tool's: GET /agents/{agent}/media/{sha256})
    )


def account_of(channel: str, user_id: str | None) -> str | None:
    """The account a user id names, "<channel>:<user id>" (e.g. "telegram:42"), the unit a person's
    linked accounts are made of."""
    return None if user_id is None else f"{channel}:{user_id}"


@dataclass(frozen=True, slots=True)
class InboundEvent:
    """One message from a person, on its way to an agent.

    `event_id` is the platform's id for this delivery (message id, Slack event
    id, Telegram update id): two events with the same (channel, event_id) are
    the same message delivered twice and are answered once. `sent_at` is when
    the person sent it (epoch seconds), when the platform says: memories made
    of the message carry that time instead of the time it was processed.
    """

    agent: str
    conversation_key: str
    text: str
    channel: str
    user_id: str | None = None
    event_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    sent_at: float | None = None
    attachments: tuple[Attachment, ...] = ()
    # the person behind the account when the daemon knows one (linked accounts); None: the account is
    # the person. Read `who`, not this.
    person: str | None = None
    # every account of `person` (this one too), set with it: whose memories the speaker also reads
    person_accounts: tuple[str, ...] = ()

    @property
    def account(self) -> str | None:
        return account_of(self.channel, self.user_id)

    @property
    def who(self) -> str | None:
        """Whom the event is from, for what is owned per person (jobs, budgets, per-person memory)."""
        return self.person or self.account

    @property
    def linked_user_ids(self) -> tuple[str, ...]:
        """The user ids of the person's other accounts ("telegram:42" -> "42"), whose memories are theirs."""
        own = self.user_id
        return tuple(sorted({a.split(":", 1)[1] for a in self.person_accounts} - {own}))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Reply:
    """What the agent answers. `duplicate` is true when the event was already answered; `approval` is
    the id of a tool call the run now waits on a person for (the text asks them)."""

    text: str
    conversation_key: str
    run_id: str | None = None
    duplicate: bool = False
    error: str | None = None
    approval: str | None = None
    cut_short: bool = False  # the model stopped at its output limit (max tokens), not at its end
    # busy: collect — this message was answered with others by one turn, whose reply the first of them
    # got too: a chat channel posts it there, once (an HTTP caller still gets the text)
    joined: bool = False
    files: tuple[OutgoingFile, ...] = ()


class ReplySink(Protocol):
    """Hears a reply while the model writes it, to show it as it grows.

    `delta` gets each new piece of the text of the current model call. When that
    call turns out to be calling tools, `restart` says the text heard since the
    last restart (e.g. "Let me look that up.") is not the reply: the next
    call's text starts afresh. The returned Reply is always what the person
    should end up seeing (it differs from what was heard after an error, or for
    an empty answer). Calls are synchronous and must not block: a slow consumer
    buffers, it never holds up the model. Nothing a sink hears is stored.
    """

    def delta(self, text: str) -> None: ...

    def restart(self) -> None: ...


class ChannelHost(Protocol):
    """What the daemon gives a channel: the only way a channel reaches the rest of agentd."""

    agent: str

    async def dispatch(self, event: InboundEvent, sink: ReplySink | None = None) -> Reply:
        """Run the event through the agent (ordered per conversation) and return the reply; `sink`
        hears the reply's text as it is written (commands and duplicates send it nothing).

        Returns a Reply with duplicate=True, and does nothing else, when this
        (channel, event_id) was answered before.
        """
        ...

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Record an audit event in the agent's trail (permission decisions, send failures)."""
        ...

    def set_status(self, channel: str, status: str, error: str | None = None) -> None:
        """Report a channel's state ("starting", "running", "reconnecting", "failed", "stopped")."""
        ...
