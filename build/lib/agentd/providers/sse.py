"""Server-Sent Events, read line by line (the WHATWG event-stream rules agentd meets in practice).

One decoder for every SSE reader in agentd: the providers' streams and the
CLI reading the daemon's own stream. Feed it lines without their line ending;
it returns an event at each blank line that ends one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str  # "message" when the stream named none
    data: str


class SSEDecoder:
    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> ServerSentEvent | None:
        """Take one line; the event it completes, if it is the blank line after one."""
        if not line:
            if not self._data and not self._event:
                return None
            event = ServerSentEvent(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # a comment: keep-alives
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None  # `id` and `retry` mean nothing to a reader that never reconnects

    def end(self) -> ServerSentEvent | None:
        """The event left when the stream ended without its blank line."""
        return self.feed("")
