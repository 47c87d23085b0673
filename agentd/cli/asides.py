"""What `agentd chat` reads while the agent answers: a tool server's question waits for the person's
`/answer`, so the terminal cannot wait for the reply alone.

While a turn runs, each line typed is read as it is entered: `/answer`, `/decline` and `/stop` go to
the agent at once (the engine answers them out of band, beside the waiting run) and their reply is
printed; any other line is held and sent, in order, once the reply is in (so a script piping several
lines still gets them answered one after another). Ctrl-C stays the main thread's: this waits in
select(), which a SIGINT interrupts, so Ctrl-C while the agent answers still stops that run.
"""

from __future__ import annotations

import concurrent.futures
import re
import select
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

from agentd.cli.terminal import main_thread_only

T = TypeVar("T")
ASIDE_RE = re.compile(r"^/(answer|decline|stop)(\s|$)")
POLL_S = 0.05  # how often the wait looks whether the reply is in while no key is typed


def is_aside(line: str) -> bool:
    return ASIDE_RE.match(line.strip()) is not None


class Typeahead:
    """The terminal's lines: those typed during a turn (held), then the prompt's."""

    def __init__(self, stream: TextIO | None = None):
        self._in = stream or sys.stdin
        self.held: deque[str] = deque()
        self.ended = False  # end of input came while a turn ran

    def next_line(self, prompt: str) -> str:
        """The next line to send: a held one first; EOFError at the end of input."""
        if self.held:
            return self.held.popleft()
        if self.ended:
            raise EOFError
        return input(prompt)

    def wait(self, future: concurrent.futures.Future[T], aside: Callable[[str], None]) -> T:
        """`future`'s result; meanwhile every line typed is read: an aside goes to `aside` at once,
        the rest is held for `next_line`."""
        while not future.done():
            if self.ended:
                concurrent.futures.wait([future], timeout=POLL_S)
                continue
            ready, _, _ = select.select([self._in], [], [], POLL_S)
            if not ready:
                continue
            line = self._in.readline()
            if not line:
                self.ended = True
            elif is_aside(line):
                aside(line.strip())
            elif line.strip():
                self.held.append(line.rstrip("\n"))
        return future.result()


def in_thread(call: Callable[[], T]) -> concurrent.futures.Future[T]:
    """`call()` on a daemon thread of its own (a request to the daemon that may outlive a Ctrl-C)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        main_thread_only()
        try:
            future.set_result(call())
        except BaseException as e:
            future.set_exception(e)

    threading.Thread(target=work, name="agentd-chat-request", daemon=True).start()
    return future


class PrintedProgress:
    """The sink of a reply printed whole (to a pipe): it shows only a tool call's progress and a tool
    server's question, each on lines of its own, as they come."""

    def __init__(self, out: TextIO | None = None):
        self._out = out or sys.stdout
        self._lock = threading.Lock()

    def delta(self, text: str) -> None:
        pass

    def restart(self) -> None:
        pass

    def progress(self, text: str) -> None:
        with self._lock:
            self._out.write(f"{text}\n")
            self._out.flush()


def said_aside(reply: Any, out: TextIO | None = None) -> None:
    """Print the agent's answer to an aside on a line of its own."""
    stream = out or sys.stdout
    stream.write(f"{reply}\n")
    stream.flush()
