"""Idempotency keys: a retried request is answered with the first one's reply, and stored once.

A client that timed out, or got a 5xx, cannot know whether its message was taken in: sending it
again must not say it twice (the official OpenAI client retries a timeout or a 5xx by itself). A
request to the webhook or the OpenAI endpoint may name itself with an `Idempotency-Key` header (or
a `message_id` field). The key becomes the event's delivery id, so it gets the de-duplication a
platform redelivery gets: the engine answers a delivery once, and the delivery is committed with
the turn, in the store, so this holds across restarts and across daemons sharing one. What the
engine gives a duplicate is no reply; this module gives the first one's:

- a retry while the first still runs (on this daemon) waits for it and gets its reply;
- a retry after it (on this daemon, one of the last MAX_REMEMBERED keys) gets the reply remembered;
- else (after a restart, on another daemon) the reply the first stored is read back
  (`Agent.delivered`): its text, or its run's error.

The first runs in a task of its own: a client that gives up does not cancel it, and its retry
waits for the same turn. A first that failed before it was answered (its store unavailable) is no
answer: the retry runs. A key names one message of one conversation (per agent and endpoint): a
retry naming another conversation is a 409. A stateless OpenAI call stores nothing, so its key is
honoured by this process only (waiting and remembering), never in the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from agentd.events import Reply
from agentd.http.errors import ApiError
from agentd.store.records import Delivered

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"  # "true" on an answer that is a retry's (as Stripe's API says it)
KEY_PATTERN = r"^[!-~]{1,255}$"  # printable ASCII without spaces: a header carries it as is
KEY_DOC = (
    "names this message (1-255 printable ASCII characters): a retry with the same key is answered with "
    "the first request's reply, and the message is stored once; a key used for another conversation, or a "
    "message_id that differs from it, is a 409"
)
MAX_REMEMBERED = 1024  # replies kept in memory per daemon for retries that come after their first

Marker = tuple[str, str, str]  # (agent, channel, key)
Run = Callable[[], Awaitable[Reply]]
Stored = Callable[[], Awaitable[Delivered | None]]


class Idempotency:
    """The daemon's requests named by a key: those running, and the replies of the latest done."""

    def __init__(self) -> None:
        # a first's task is held here while it runs (the loop holds tasks weakly), whoever awaits it
        self._running: dict[Marker, asyncio.Task[Reply]] = {}
        self._done: OrderedDict[Marker, Reply] = OrderedDict()

    async def once(self, marker: Marker, conversation_key: str, run: Run, stored: Stored | None) -> Reply:
        """`run()` the first time `marker` comes; its reply (duplicate=True) every other time."""
        while True:
            if (done := self._done.get(marker)) is not None:
                return _same(marker, dataclasses.replace(done, duplicate=True), conversation_key)
            first = self._running.get(marker)
            if first is None:
                break
            try:
                reply = await asyncio.shield(first)
            except Exception:
                continue  # the first was not answered: this one runs, unless another retry already does
            return _same(marker, dataclasses.replace(reply, duplicate=True), conversation_key)
        task = asyncio.create_task(self._first(marker, conversation_key, run, stored))
        self._running[marker] = task
        task.add_done_callback(_retrieved)
        return _same(marker, await asyncio.shield(task), conversation_key)

    async def _first(self, marker: Marker, conversation_key: str, run: Run, stored: Stored | None) -> Reply:
        try:
            reply = await run()
            if reply.duplicate:  # answered before: by this daemon before a restart, or by another one
                reply = _replayed(await stored() if stored is not None else None, conversation_key)
            self._done[marker] = reply
            while len(self._done) > MAX_REMEMBERED:
                self._done.popitem(last=False)
            return reply
        finally:
            self._running.pop(marker, None)


def key_of(header: str | None, field: str | None) -> str | None:
    """The request's key: the header or the body's `message_id`. Both, differing, is a 409: each is a
    well-formed name, but they name two messages at once (a conflict, not a malformed request)."""
    if header is not None and field is not None and header != field:
        raise ApiError(409, f"the {HEADER} header ({header!r}) and message_id ({field!r}) differ: send one")
    return header if header is not None else field


def replay_headers(reply: Reply) -> dict[str, str]:
    return {REPLAYED_HEADER: "true"} if reply.duplicate else {}


def _same(marker: Marker, reply: Reply, conversation_key: str) -> Reply:
    if reply.conversation_key != conversation_key:
        raise ApiError(
            409,
            f"{HEADER} {marker[2]!r} named a message of conversation {reply.conversation_key!r}, not of "
            f"{conversation_key!r}: a key names one message",
        )
    return reply


def _replayed(delivered: Delivered | None, conversation_key: str) -> Reply:
    """The stored outcome of a first request, as its reply."""
    if delivered is None:  # seen, then pruned (a week on) before it could be read
        return Reply("(this message was answered already)", conversation_key, duplicate=True)
    key = delivered.conversation_key or conversation_key
    if delivered.status == "error":
        # (whether the message was kept depends on the agent's memory, which the stored outcome does
        # not say: the first reply said it; this one claims nothing it cannot know)
        text = (
            f"Sorry, I could not reach the model when this message first came ({delivered.error}). "
            "Send a new message to go on."
        )
        return Reply(text, key, delivered.run_id, duplicate=True, error="provider_error")
    # no reply stored: a command, or an agent that keeps no transcript; nothing to repeat
    text = delivered.reply if delivered.reply is not None else "(answered already; its reply was not kept)"
    return Reply(text, key, delivered.run_id, duplicate=True)


def _retrieved(task: asyncio.Task[Reply]) -> None:
    """A first whose every client left still ends in an error someone read (no asyncio warning)."""
    if not task.cancelled():
        task.exception()
