"""A reply sink that writes down what it hears, for tests of streamed replies (agentd.events.ReplySink)."""

from __future__ import annotations


class Heard:
    """Writes down the pieces it hears, and `|` for each restart (the text so far was not the reply)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def delta(self, text: str) -> None:
        self.log.append(text)

    def restart(self) -> None:
        self.log.append("|")

    @property
    def showing(self) -> str:
        """What a consumer shows now: the text heard since the last restart."""
        text = "".join(self.log)
        return text.rsplit("|", 1)[-1]
