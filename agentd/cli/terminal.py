"""What `agentd chat` shows on a terminal while the agent answers: a spinner, then the reply as it is written.

`TerminalReply` is a ReplySink: the spinner turns until the first text, text is
printed as it arrives, a tool's progress (and a tool server's question) on lines of its own, text
taken back by a restart (the model went on to call
a tool) is erased, and `finish` leaves exactly the reply on the screen (the
error reply, say, when the stream broke off). Its calls may come from another
thread (the agent's loop, in-process), so they take a lock.
"""

from __future__ import annotations

import itertools
import shutil
import signal
import sys
import threading
import unicodedata
from typing import TextIO

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def main_thread_only() -> None:
    """Keep SIGINT (Ctrl-C) for the main thread: delivered to another thread it would not wake the
    main one out of readline's wait, and the terminal would seem to ignore it until Enter."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


class Spinner:
    """A spinner on stderr ("thinking…") until stopped; nothing when `show` is false."""

    def __init__(self, show: bool):
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if show:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()

    def _spin(self) -> None:
        main_thread_only()
        for frame in itertools.cycle(FRAMES):
            if self._done.wait(0.1):
                break
            sys.stderr.write(f"\r{frame} thinking…")
            sys.stderr.flush()
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()

    def stop(self) -> None:
        """Stop and clear the spinner's line (returns once it is cleared)."""
        self._done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


class TerminalReply:
    def __init__(self, spinner: Spinner, out: TextIO | None = None):
        self._spinner = spinner
        self._out = out or sys.stdout
        self._lock = threading.Lock()
        self._shown = ""  # what is on the screen of this reply, since the last restart

    def delta(self, text: str) -> None:
        with self._lock:
            self._spinner.stop()
            self._write(text)
            self._shown += text

    def restart(self) -> None:
        with self._lock:
            self._erase()

    def progress(self, text: str) -> None:
        """A tool call's progress, or a tool server's question: lines of their own, which stay."""
        with self._lock:
            self._spinner.stop()
            if self._shown:  # what was written stays above; the reply is written again below
                self._write("\n")
                self._shown = ""
            self._write(f"{text}\n")

    @property
    def shown(self) -> str:
        """What is on the screen of this reply now."""
        with self._lock:
            return self._shown

    def finish(self, reply: str) -> None:
        """Leave exactly `reply` on the screen, then a new line."""
        with self._lock:
            self._spinner.stop()
            if self._shown != reply:
                self._erase()
                self._write(reply)
            self._write("\n")
            self._shown = ""

    def abandon(self) -> None:
        """The reply will not come (the daemon went away): end the line its start was written on."""
        with self._lock:
            self._spinner.stop()
            if self._shown:
                self._write("\n")
                self._shown = ""

    def _erase(self) -> None:
        """Take what was written of this reply off the screen: up to its first row, and clear below."""
        if not self._shown:
            return
        width = max(1, shutil.get_terminal_size().columns)
        rows = sum(max(1, -(-_columns(line) // width)) for line in self._shown.split("\n"))
        self._write("\r" + (f"\033[{rows - 1}A" if rows > 1 else "") + "\033[J")
        self._shown = ""

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def _columns(line: str) -> int:
    """How many terminal columns a line takes (wide East Asian characters take two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
