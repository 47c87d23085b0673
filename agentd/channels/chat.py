"""The base every chat channel stands on: a platform matches and sends, the base does the rest.

A platform supplies a pure `match` (one raw event -> a `Route`, or None when
the event is not for this agent) and `send_chunk` (one piece of a reply to a
route's target). The base turns those into what every channel does the same
way: the allow-list check and its `permission` audit, dispatch to the host
with a typing indicator, splitting the reply at the platform's limit, retrying
a chunk (the platform's own wait after a rate limit, backoff after a transient
failure), the `send_failed` audit, and tracking handlers in flight so that
stop can drain them. With `stream: true` (a platform that also supplies
`edit_chunk` and `delete_chunk`) the reply shows while it is written and ends
as the same messages (streaming.py). A route carries the message's files
(`Attachment`s); a reply's files follow its text through `send_file`, and one
that cannot go out is audited (`file_failed`) and said, never the end of the send.

Match, then handle (style.md #6): `receive` matches synchronously and starts
the handler in a task it tracks; a handler's exception goes to
`on_handler_error` and never reaches the platform client's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentd.channels.splitting import split_message
from agentd.channels.streaming import PartFailed, StreamedReply
from agentd.events import Attachment, ChannelHost, InboundEvent, OutgoingFile, Reply, ReplySink

log = logging.getLogger(__name__)

RawT = TypeVar("RawT")
TargetT = TypeVar("TargetT")
T = TypeVar("T")


@dataclass(frozen=True)
class Route(Generic[TargetT]):
    """One message this agent answers: what the host gets, and where the reply goes."""

    conversation_key: str
    text: str
    user_id: str
    event_id: str  # the platform's id of the message: the same for a redelivery
    target: TargetT  # the platform's address for the reply and the typing indicator
    place: str | None = None  # checked against the place allow-list; None: a direct message
    where: dict[str, Any] = field(default_factory=dict)  # platform ids every audit of it names
    metadata: dict[str, Any] = field(default_factory=dict)  # travels on the InboundEvent
    sent_at: float | None = None  # when the person sent it, as the platform says (epoch seconds)
    attachments: tuple[Attachment, ...] = ()  # the message's files, fetched only when the engine asks


@dataclass(frozen=True)
class AllowList:
    """Who may talk to the agent: user ids, and places (channels, chats, guilds). Empty: anyone."""

    users: Collection[str] = ()
    places: Collection[str] = ()
    place_kind: str = "channel"  # what a place is called on this platform, for the config key and reasons

    def refusal(self, user_id: str, place: str | None) -> str | None:
        """Why this speaker in this place is not answered, or None when they are."""
        if self.users and user_id not in self.users:
            return "user not in allowed_users"
        if self.places:
            key = f"allowed_{self.place_kind}s"
            if place is None:
                # A direct message is in no place: without a user list it would bypass the place list.
                if not self.users:
                    return f"direct messages are closed when {key} is set and allowed_users is empty"
            elif place not in self.places:
                return f"{self.place_kind} not in {key}"
        return None


class ChatChannel(ABC, Generic[RawT, TargetT]):
    """One agent's connection to a chat platform; see the module docstring for who does what."""

    name: str
    message_limit: int  # the longest message the platform accepts, in characters
    typing_every: float | None = None  # seconds between typing calls; None: the platform shows none
    drain_seconds = 3.0  # stop lets handlers in flight finish this long, then cancels them
    rate_limit_retries = 5  # a chunk survives this many rate limits, each after the platform's wait
    exclusive = True  # one connection per bot (see Channel.exclusive); HTTP-callback modes say otherwise
    stream_every: float | None = None  # stream: seconds between edits of a reply being written; None: off

    def __init__(self, agent: str, allow: AllowList) -> None:
        self.agent = agent
        self.allow = allow
        self._host: ChannelHost | None = None
        self._stopping = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._denied: deque[str] = deque(maxlen=256)  # event ids already audited as denied

    # -- the seam --------------------------------------------------------------------------------

    @abstractmethod
    async def run(self, host: ChannelHost) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    # -- what a platform supplies ----------------------------------------------------------------

    @abstractmethod
    def match(self, raw: RawT) -> Route[TargetT] | None:
        """Where one raw platform event goes, or None when it is not for this agent. No I/O."""

    @abstractmethod
    async def send_chunk(self, target: TargetT, text: str, part: int) -> Any:
        """Send one piece (`part` counts from 1) of a reply; raise when it did not go out. Returns the
        platform's handle of the message, which `edit_chunk` and `delete_chunk` take."""

    async def send_file(self, target: TargetT, file: OutgoingFile, part: int) -> Any:
        """Send one file of a reply as an attachment (`part` numbers it after the text's chunks);
        raise when it did not go out."""
        raise NotImplementedError(f"the {self.name} channel cannot send files")

    async def edit_chunk(self, target: TargetT, sent: Any, text: str) -> None:
        """Change the text of a message `send_chunk` sent (streamed replies only)."""
        raise NotImplementedError(f"the {self.name} channel cannot edit its messages")

    async def delete_chunk(self, target: TargetT, sent: Any) -> None:
        """Delete a message `send_chunk` sent (a streamed reply that ended shorter than it grew)."""
        raise NotImplementedError(f"the {self.name} channel cannot delete its messages")

    def stream_edit_every(self, target: TargetT) -> float | None:
        """Seconds between edits of a reply streamed to this target; None: send replies whole."""
        return self.stream_every

    async def show_typing(self, target: TargetT) -> None:
        """Show "typing" at the target once; called every `typing_every` seconds while a turn runs."""

    def target_for(self, conversation_key: str) -> TargetT | None:
        """Where a message into this conversation goes, read off its key; None: this platform cannot
        post into a conversation outside a reply."""
        return None

    def rate_limit_wait(self, exc: Exception) -> float | None:
        """The seconds the platform asked us to wait before sending again, if `exc` is a rate limit."""
        return None

    def is_transient(self, exc: Exception) -> bool:
        """Whether a failed send may work when tried again (a timeout, a 5xx, a dropped connection)."""
        return False

    def send_retry_delays(self) -> Iterable[float]:
        """The waits before each retry of a transient failure; as many retries as waits."""
        return ()

    def describe_error(self, exc: BaseException) -> str:
        """A failure as the log and the audit trail show it (a platform may redact secrets here)."""
        return f"{type(exc).__name__}: {exc}"

    def on_handler_error(self, route: Route[TargetT] | None, exc: BaseException) -> None:
        """The error hook: one bad message is logged and never takes the channel down."""
        where = "an event" if route is None else f"a message in {route.conversation_key}"
        log.error("%s channel of agent %s: handling %s failed", self.name, self.agent, where, exc_info=exc)

    # -- match, then handle ----------------------------------------------------------------------

    def receive(self, raw: RawT) -> bool:
        """Match one raw event and, when it is for this agent, handle it in a tracked task.

        True when the event was taken. Never raises: the platform client calls
        this from its own loop.
        """
        try:
            route = self.match(raw)
        except Exception as exc:
            self.on_handler_error(None, exc)
            return False
        if route is None or self._host is None:
            return False
        self.track(self._handle(self._host, route))
        return True

    def track(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `work` in a task that stop drains: a handler, or what gathers several events into one
        message first (Telegram's albums), which then `handle`s it."""
        task = asyncio.create_task(work)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return task

    async def handle(self, route: Route[TargetT]) -> None:
        """Handle a route matched outside `receive`, in the caller's (tracked) task."""
        if self._host is not None:
            await self._handle(self._host, route)

    async def _handle(self, host: ChannelHost, route: Route[TargetT]) -> None:
        try:
            refusal = self.allow.refusal(route.user_id, route.place)
            if refusal is not None:
                await self._deny(host, route, refusal)
                return
            every = self.stream_edit_every(route.target)
            if every is not None:
                await self._stream_reply(host, route, every)
                return
            reply = await self._dispatch(host, route)
            if reply.duplicate or reply.joined:  # (a joined reply is posted where its first message is)
                return
            if reply.text.strip():
                await self._send_reply(host, route, reply)
            await self._send_files(host, route, reply)
        except Exception as exc:
            self.on_handler_error(route, exc)

    async def _stream_reply(self, host: ChannelHost, route: Route[TargetT], every: float) -> None:
        shown = StreamedReply(self, route.target, every)
        try:
            reply = await self._dispatch(host, route, shown)
        finally:
            await shown.stop()
        if reply.duplicate or reply.joined:  # (a joined reply is posted where its first message is)
            return
        try:
            await shown.settle(reply.text)
        except PartFailed as failed:
            cause = failed.__cause__ or failed
            await self._send_failed(host, route, reply, failed.part, failed.parts, cause)
        await self._send_files(host, route, reply)

    async def _deny(self, host: ChannelHost, route: Route[TargetT], reason: str) -> None:
        if route.event_id in self._denied:
            return  # one message can arrive as several events (Slack: `message` and `app_mention`)
        self._denied.append(route.event_id)
        log.info("%s: denied %s in %s: %s", self.name, route.user_id, route.conversation_key, reason)
        data = {"channel": self.name, "user_id": route.user_id, **route.where, "reason": reason}
        await host.audit("permission", "denied", conversation_key=route.conversation_key, data=data)

    async def _dispatch(
        self, host: ChannelHost, route: Route[TargetT], sink: ReplySink | None = None
    ) -> Reply:
        event = InboundEvent(
            agent=self.agent,
            conversation_key=route.conversation_key,
            text=route.text,
            channel=self.name,
            user_id=route.user_id,
            event_id=route.event_id,
            metadata=route.metadata,
            sent_at=route.sent_at,
            attachments=route.attachments,
        )
        typing = None
        if self.typing_every is not None:
            typing = asyncio.create_task(self._keep_typing(route.target, self.typing_every))
        # No await before dispatch: events of one conversation reach the host in arrival order.
        try:
            return await host.dispatch(event, sink)
        finally:
            if typing is not None:
                typing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await typing

    async def _keep_typing(self, target: TargetT, every: float) -> None:
        while True:
            try:
                await self.show_typing(target)
            except Exception as exc:  # the indicator is a courtesy: the reply never waits for it
                log.debug(
                    "%s: typing indicator failed, none this turn: %s", self.name, self.describe_error(exc)
                )
                return
            await asyncio.sleep(every)

    async def _send_reply(self, host: ChannelHost, route: Route[TargetT], reply: Reply) -> None:
        """Send every chunk in order; at the first one that cannot go out, log and audit, and stop."""
        chunks = split_message(reply.text, self.message_limit)
        for part, chunk in enumerate(chunks, start=1):
            try:
                await self.retrying(functools.partial(self.send_chunk, route.target, chunk, part))
            except Exception as exc:
                await self._send_failed(host, route, reply, part, len(chunks), exc)
                return

    async def _send_files(self, host: ChannelHost, route: Route[TargetT], reply: Reply) -> None:
        """Send a reply's files after its text, each on its own; the ones that cannot go out are
        audited and then said in one message, and never stop the others."""
        first = len(split_message(reply.text, self.message_limit)) + 1 if reply.text.strip() else 1
        failed: list[str] = []
        for part, file in enumerate(reply.files, start=first):
            try:
                await self.retrying(functools.partial(self.send_file, route.target, file, part))
            except Exception as exc:
                error = self.describe_error(exc)
                log.error(
                    "%s: file %s in %s not sent: %s", self.name, file.filename, route.conversation_key, error
                )
                data = {"channel": self.name, **route.where, "run_id": reply.run_id, "error": error}
                data |= {"filename": file.filename, "mime_type": file.mime_type, "bytes": len(file.data)}
                await host.audit("channel", "file_failed", conversation_key=route.conversation_key, data=data)
                failed.append(file.filename)
        if failed:
            notice = f"(I could not send {', '.join(failed)}: the upload failed.)"
            part = first + len(reply.files)  # a part of its own: Discord's nonce tells sends apart by it
            try:
                await self.retrying(functools.partial(self.send_chunk, route.target, notice, part))
            except Exception as exc:  # already audited; nothing further to fall back on
                log.error(
                    "%s: the notice of files not sent failed too: %s", self.name, self.describe_error(exc)
                )

    async def _send_failed(
        self,
        host: ChannelHost,
        route: Route[TargetT],
        reply: Reply,
        part: int,
        parts: int,
        exc: BaseException,
    ) -> None:
        error = self.describe_error(exc)
        log.error(
            "%s channel of agent %s: reply in %s failed at part %d of %d: %s",
            self.name,
            self.agent,
            route.conversation_key,
            part,
            parts,
            error,
        )
        data = {"channel": self.name, **route.where, "run_id": reply.run_id}
        data |= {"part": part, "parts": parts, "error": error}
        await host.audit("channel", "send_failed", conversation_key=route.conversation_key, data=data)

    async def retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Make a platform call, retrying it after a rate limit (the platform's wait) or a transient failure."""
        transient_waits = iter(self.send_retry_delays())
        rate_limits = 0
        while True:
            try:
                return await call()
            except Exception as exc:
                wait = self.rate_limit_wait(exc)
                if wait is not None:
                    rate_limits += 1
                    if rate_limits > self.rate_limit_retries:
                        raise
                elif not self.is_transient(exc) or (wait := next(transient_waits, None)) is None:
                    raise
                else:
                    log.warning(
                        "%s: send failed, retrying in %.2f s: %s", self.name, wait, self.describe_error(exc)
                    )
            await asyncio.sleep(wait)

    async def post(self, conversation_key: str, text: str) -> bool:
        """Post into a conversation outside a reply (a run resumed after an approval): split, retried
        like a reply; False when the platform cannot say where the conversation is."""
        target = self.target_for(conversation_key)
        if target is None or self._host is None:
            return False
        for part, chunk in enumerate(split_message(text, self.message_limit), start=1):
            await self.retrying(functools.partial(self.send_chunk, target, chunk, part))
        return True

    # -- lifecycle helpers -----------------------------------------------------------------------

    async def drain(self) -> None:
        """Give handlers in flight `drain_seconds` to send their replies, then cancel the rest."""
        pending = {task for task in self._in_flight if task is not asyncio.current_task()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=self.drain_seconds)
        if not pending:
            return
        for task in pending:
            task.cancel()
        log.warning(
            "%s channel of agent %s: cancelled %d unfinished turn(s) at stop",
            self.name,
            self.agent,
            len(pending),
        )
        await asyncio.wait(pending, timeout=1.0)

    async def _pause(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Sleep, waking early on stop (or on `wake`); True when stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((wake or self._stopping).wait(), seconds)
        return self._stopping.is_set()

    def _status(self, status: str, error: str | None = None) -> None:
        if self._host is not None:
            self._host.set_status(self.name, status, error)
