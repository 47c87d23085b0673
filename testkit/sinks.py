"""A reply sink that writes down what it hears, for tests of streamed replies (agentd.events.ReplySink)."""

from __future__ import annotations


class Heard:
    """Writes down the pieces it hears, and `|` for each restart (the text so far was not the reply)."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.progress_heard: list[str] = []  # how far tool calls were (not part of the reply's text)

    def delta(self, text: str) -> None:
        self.log.append(text)

    def restart(self) -> None:
        self.log.append("|")

    def progress(self, text: str) -> None:
        self.progress_heard.append(text)

    @property
    def showing(self) -> str:
        """What a consumer shows now: the text heard since the last restart."""
        text = "".join(self.log)
        return text.rsplit("|", 1)[-1]
