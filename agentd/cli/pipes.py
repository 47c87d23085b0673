"""Output into a pipe whose reader left (`agentd audit export | head`): stop quietly.

Python turns the SIGPIPE a shell pipeline relies on into BrokenPipeError, raised at whichever print or
flush meets the closed pipe, and again when the interpreter flushes stdout at exit ("Exception ignored
… BrokenPipeError"). The command stops at the first one; stdout is then pointed at /dev/null so the
buffered rest has nowhere to fail (the recipe of Python's signal module documentation).
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_on_closed_pipe() -> Iterator[None]:
    """Suppress a BrokenPipeError from the block, and from flushing stdout after it however the block
    ended (output still buffered meets the closed pipe here, not at exit; argparse's --help exits)."""
    broke = False
    try:
        yield
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe or socket broke (a command's connection): not this, an error to show
        broke = True
    finally:
        if not broke:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                broke = True
        if broke:
            _silence_stdout()


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe with no reader left: poll() then reports POLLERR on it (Linux, BSD)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture), or no poll()
        return True


def _silence_stdout() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
