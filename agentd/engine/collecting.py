"""`busy: collect`: the messages that arrive while a conversation's turn runs are answered together.

With `busy: queue` (the default) each message waits its turn and gets its own. With `collect`,
the first message that finds its conversation busy opens a batch and waits for the turn to
end; every message that comes meanwhile joins that batch. When the conversation is free, the
batch is closed (later messages open the next one) and answered by one turn: each message is
stored as the person sent it, the model reads them all, and every sender gets that one reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentd.events import InboundEvent, Reply


@dataclass
class Collected:
    """One conversation's messages waiting for the same turn; the first one runs it."""

    events: list[InboundEvent]
    reply: asyncio.Future[Reply] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def fail(self, error: BaseException) -> None:
        """The leader's turn failed: the others get the same failure."""
        if self.reply.done():
            return
        if isinstance(error, asyncio.CancelledError):
            self.reply.cancel()
            return
        self.reply.set_exception(error)
        self.reply.exception()  # retrieved: a batch nobody else waits on must not warn


class Collecting:
    def __init__(self) -> None:
        self._open: dict[str, Collected] = {}

    def join(self, event: InboundEvent) -> Collected:
        """The conversation's open batch, with `event` added (a new one, led by it, when none is open)."""
        batch = self._open.get(event.conversation_key)
        if batch is None:
            batch = self._open[event.conversation_key] = Collected([event])
        else:
            batch.events.append(event)
        return batch

    def close(self, key: str, batch: Collected | None) -> Sequence[InboundEvent]:
        """The turn of `batch` begins: no message joins it any more; the ones after its leader."""
        if batch is None:
            return ()
        if self._open.get(key) is batch:
            del self._open[key]
        return tuple(batch.events[1:])
