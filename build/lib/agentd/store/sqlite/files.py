"""The agent files open at once: each opened at its first use, at most a cap of them, idle ones closed.

A daemon with thousands of agents cannot keep a connection per agent: an open
SQLite file in WAL mode holds three descriptors (the file, its -wal and -shm),
so 1,000 agents held 3,000 and ~330 agents were enough to run out under the
common limit of 1,024. Here every store asks for its connection on the store
thread (the only thread that uses connections, so no locks), the least
recently used files beyond the cap are closed, and a periodic sweep closes
those idle for long. Opening a file is ~0.1 ms, so an agent that wakes up pays
that once and nobody else notices.

Running out of descriptors anyway (sockets count too) closes half of the files
open, keeps fewer open from then on, and tries once more; if that fails too,
the one call fails with a StoreError that says so, and everything else goes on.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import sqlite3
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from agentd.errors import StoreError

log = logging.getLogger("agentd")
DESCRIPTORS_PER_FILE = 3  # the file, its -wal and its -shm
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class Openable(Protocol):
    """A store whose connection this keeps (SqliteStore)."""

    path: Path
    _conn: sqlite3.Connection | None

    def _connect(self) -> sqlite3.Connection:
        """Open (and, the first time, migrate) the file; raises what sqlite3 or the OS raise."""
        ...


def open_files_limit() -> int:
    """The process's soft limit on open descriptors."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fitting_cap(wanted: int, limit: int) -> int:
    """At most `wanted` files, leaving a quarter of the descriptors (at least 32) for everything else."""
    spare = max(32, limit // 4)
    return max(1, min(wanted, (limit - spare) // DESCRIPTORS_PER_FILE))


def out_of_descriptors(error: BaseException) -> bool:
    """Whether an open failed because the process (or system) has no descriptor left.

    sqlite3 says only "unable to open database file", so after one of its errors
    try to open as many descriptors as a file needs.
    """
    if isinstance(error, OSError):
        return error.errno in _OUT_OF_DESCRIPTORS
    if not isinstance(error, sqlite3.Error):
        return False
    probes: list[int] = []
    try:
        for _ in range(DESCRIPTORS_PER_FILE):
            probes.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as e:
        return e.errno in _OUT_OF_DESCRIPTORS
    finally:
        for fd in probes:
            os.close(fd)
    return False


class OpenFiles:
    """The LRU of open agent files; used only on the store thread."""

    def __init__(self, max_open: int = 256, idle_after_s: float = 60.0):
        self.wanted = max_open
        self.limit = open_files_limit()
        self.cap = fitting_cap(max_open, self.limit)
        if self.cap < max_open:
            log.warning(
                "store.max_open_files %d does not fit the open-files limit %d: keeping at most %d agent "
                "files open (raise the limit: ulimit -n, or LimitNOFILE= for a systemd service)",
                max_open,
                self.limit,
                self.cap,
            )
        self.idle_after_s = idle_after_s
        self._open: OrderedDict[Openable, float] = OrderedDict()  # store -> last used (monotonic)
        self.opened = 0
        self.closed_lru = 0
        self.closed_idle = 0
        self.shortages = 0  # times descriptors ran out while opening a file

    def connection(self, store: Openable) -> sqlite3.Connection:
        """The store's connection, opened now if it is not open (closing others beyond the cap)."""
        conn = store._conn
        now = time.monotonic()
        if conn is not None:
            self._open[store] = now
            self._open.move_to_end(store)
            return conn
        self._close_beyond(self.cap - 1)
        conn = self._open_with_room(store)
        store._conn = conn
        self._open[store] = now
        self.opened += 1
        return conn

    def _open_with_room(self, store: Openable) -> sqlite3.Connection:
        try:
            return store._connect()
        except (OSError, sqlite3.Error) as e:
            if not out_of_descriptors(e):
                raise
        # Out of descriptors (sockets, other files): close half of ours, keep fewer open from now on.
        self.shortages += 1
        self.cap = max(1, len(self._open) // 2)
        self._close_beyond(self.cap - 1)
        log.warning(
            "out of file descriptors opening %s: keeping at most %d agent files open for now",
            store.path,
            self.cap,
        )
        try:
            return store._connect()
        except (OSError, sqlite3.Error) as e:
            if not out_of_descriptors(e):
                raise
            raise StoreError(
                f"cannot open {store.path}: the process is out of file descriptors (limit "
                f"{open_files_limit()}, {len(self._open)} agent files open); try again shortly, and raise "
                "the limit (ulimit -n, or LimitNOFILE= for a systemd service)"
            ) from None

    def _close_beyond(self, keep: int) -> None:
        while len(self._open) > max(0, keep):
            store, _ = self._open.popitem(last=False)
            self._close_conn(store, optimize=False)
            self.closed_lru += 1

    def close(self, store: Openable, *, optimize: bool) -> None:
        """Close one store's file now (it reopens on its next use)."""
        self._open.pop(store, None)
        self._close_conn(store, optimize=optimize)

    def close_idle(self) -> int:
        """Close the files unused for `idle_after_s`; and, with no shortage since, allow more open again."""
        cutoff = time.monotonic() - self.idle_after_s
        idle = [store for store, used in self._open.items() if used < cutoff]
        for store in idle:
            del self._open[store]
            self._close_conn(store, optimize=True)
        self.closed_idle += len(idle)
        if self.cap < fitting_cap(self.wanted, self.limit):
            self.cap = min(fitting_cap(self.wanted, self.limit), self.cap * 2)
        return len(idle)

    @staticmethod
    def _close_conn(store: Openable, *, optimize: bool) -> None:
        conn, store._conn = store._conn, None
        if conn is None:
            return
        try:
            if optimize and not conn.in_transaction:
                conn.execute("PRAGMA optimize")
        except sqlite3.Error as e:
            log.debug("PRAGMA optimize on %s failed: %s", store.path, e)
        finally:
            conn.close()

    def stats(self) -> dict[str, Any]:
        return {
            "open": len(self._open),
            "max_open": self.cap,
            "configured_max_open": self.wanted,
            "descriptor_limit": self.limit,
            "opened": self.opened,
            "closed_lru": self.closed_lru,
            "closed_idle": self.closed_idle,
            "descriptor_shortages": self.shortages,
        }
