"""A deadline for every round trip: one watchdog thread cuts the connection of a job that outlived it.

TCP keepalives and tcp_user_timeout notice a peer that stopped acknowledging, and statement_timeout a
statement the server runs too long; neither notices a path that accepts every byte and answers none
(a stalled proxy or pooler, a half-dead middlebox): psycopg's sync connection then waits forever, and
so did the requests behind it. The watchdog shuts the socket down at the job's deadline, which wakes
the thread blocked on it with an error at once; the connection is then broken, dropped and replaced.

That bounds the waiting, not what the server may still do with bytes already sent: they can arrive
when the network comes back. So a fenced write also carries its deadline in the server's clock
(agentd_check_fence, migration 0007) and is refused if it arrives later; the watchdog fires a little
after that deadline (GRACE), so the answer of a write that committed in time has time to come back.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import Any

import psycopg

GRACE_FRACTION = 0.1  # the watchdog waits this much of the deadline longer than the server would
MIN_GRACE_S = 0.25


def grace(deadline_s: float) -> float:
    return max(MIN_GRACE_S, deadline_s * GRACE_FRACTION)


def cut(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket down (both ways): whoever waits on it wakes with an error."""
    try:
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
    except (OSError, psycopg.Error):
        return  # closed meanwhile
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


class Watchdog:
    """Armed with (connection, when) per job, disarmed when the job ends; cuts what is overdue."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, conn: psycopg.Connection[Any], after_s: float) -> int:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentd-pg-watchdog", daemon=True)
                self._thread.start()
            job = next(self._ids)
            when = time.monotonic() + after_s
            earliest = min((due for due, _ in self._due.values()), default=None)
            self._due[job] = (when, conn)
            if earliest is None or when < earliest:
                self._cond.notify()
            return job

    def disarm(self, job: int) -> bool:
        """Forget the job; True if its connection was cut (it ran past its deadline)."""
        with self._cond:
            self._due.pop(job, None)
            if job in self._fired:
                self._fired.discard(job)
                return True
            return False

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                overdue = [job for job, (when, _) in self._due.items() if when <= now]
                for job in overdue:
                    _, conn = self._due.pop(job)
                    self._fired.add(job)
                    cut(conn)
                earliest = min((when for when, _ in self._due.values()), default=None)
                self._cond.wait(None if earliest is None else max(0.0, earliest - time.monotonic()))
