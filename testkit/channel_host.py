"""A ChannelHost for testing channels without an engine or a store.

It answers every event with a deterministic reply that shows which
conversation it landed in and how many messages that conversation has seen
(or what `reply_with` makes of the event), de-duplicates by (channel,
event_id) like the engine does, and records audits and status changes so
tests can assert on them. Given a sink, it tells it the reply word by word
(or `piece_chars` characters at a time), `piece_delay` seconds apart, after `preamble` and a restart when one is set
(as a model that writes a line, then calls a tool).
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from agentd.events import InboundEvent, Reply, ReplySink


class RecordingHost:
    def __init__(
        self,
        agent: str = "bot",
        reply_delay: float = 0.0,
        *,
        reply_with: Callable[[InboundEvent], str] | None = None,
        piece_delay: float = 0.0,
        piece_chars: int | None = None,
        preamble: str | None = None,
        progress: str | None = None,
    ):
        self.agent = agent
        self.events: list[InboundEvent] = []
        self.audits: list[dict[str, Any]] = []
        self.statuses: list[tuple[str, str, str | None]] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.seen: set[tuple[str, str]] = set()
        self.reply_delay = reply_delay
        self.reply_with = reply_with
        self.piece_delay = piece_delay
        self.piece_chars = piece_chars
        self.preamble = preamble
        self.progress = progress  # a tool call's progress the sink hears before the reply (if it can)
        self.event_arrived = asyncio.Event()

    async def dispatch(self, event: InboundEvent, sink: ReplySink | None = None) -> Reply:
        if event.event_id is not None:
            marker = (event.channel, event.event_id)
            if marker in self.seen:
                return Reply(text="", conversation_key=event.conversation_key, duplicate=True)
            self.seen.add(marker)
        self.events.append(event)
        self.event_arrived.set()
        if self.reply_delay:
            await asyncio.sleep(self.reply_delay)
        self.counts[event.conversation_key] += 1
        n = self.counts[event.conversation_key]
        text = f"[{event.conversation_key} #{n}] you said: {event.text}"
        if self.reply_with is not None:
            text = self.reply_with(event)
        if sink is not None:
            if self.preamble is not None:
                await self._tell(sink, self.preamble)
                sink.restart()
            if self.progress is not None and hasattr(sink, "progress"):
                sink.progress(self.progress)
                await asyncio.sleep(self.piece_delay * 10)
            await self._tell(sink, text)
        return Reply(text=text, conversation_key=event.conversation_key, run_id=f"run{len(self.events)}")

    async def _tell(self, sink: ReplySink, text: str) -> None:
        size = self.piece_chars
        pieces = (
            re.findall(r"\S*\s*", text)
            if size is None
            else [text[i : i + size] for i in range(0, len(text), size)]
        )
        for piece in pieces:
            if piece:
                sink.delta(piece)
                await asyncio.sleep(self.piece_delay)

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        self.audits.append(
            {"kind": kind, "action": action, "conversation_key": conversation_key, "data": data or {}}
        )

    def set_status(self, channel: str, status: str, error: str | None = None) -> None:
        self.statuses.append((channel, status, error))

    def last_status(self, channel: str) -> str | None:
        for ch, status, _ in reversed(self.statuses):
            if ch == channel:
                return status
        return None

    async def wait_for_events(self, n: int, timeout: float = 5.0) -> None:
        async def _wait() -> None:
            while len(self.events) < n:
                self.event_arrived.clear()
                await self.event_arrived.wait()

        await asyncio.wait_for(_wait(), timeout)
