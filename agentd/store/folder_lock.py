"""One daemon per data folder: an exclusive lock on `<data>/agentd.lock` for the daemon's lifetime.

Two daemons on one folder once broke a conversation for good (lessons.md), so this lock is for
`agentd run` to take before it loads an agent, binds a port or writes anything: a second daemon is
then refused at once, with the holder's PID and HTTP address.

`fcntl.flock` belongs to the open file, which the kernel closes when the process ends in any way,
kill -9 included: there is never a stale lock to clean up, and a new daemon can start the moment the
old one is gone. The descriptor is not inherited across exec (Python opens files close-on-exec), so a
child process the daemon started does not keep the folder locked after the daemon dies.

The file itself is never deleted: unlinking it would let a second daemon create and lock a new file
under the same name while the first still holds the old one. Its content (one JSON line) says who holds
it; `probe()` reads that to find the running daemon. Content left behind by a killed daemon means
nothing, because only a held lock makes the content current.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from agentd.errors import DataFolderInUse

LOCK_FILE = "agentd.lock"
T = TypeVar("T")

# A probe holds a shared lock for the microseconds it takes to test the file, and a new holder has
# the lock a moment before its record is written: both sides retry for this long before concluding.
GRACE_SECONDS = 0.2
_RETRY_EVERY = 0.005


@dataclass(frozen=True)
class Holder:
    """The daemon holding a data folder, as it described itself in the lock file."""

    pid: int | None
    hostname: str | None
    started_at: str | None  # ISO 8601, UTC
    http_address: str | None = None  # e.g. http://127.0.0.1:8765, once the port is bound
    agents_dir: str | None = None  # the agents folder it serves (absolute), for a CLI naming another one

    def to_line(self) -> bytes:
        return (json.dumps(asdict(self), separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_text(cls, text: str) -> Holder | None:
        """The record in the file, or None while it is missing or half written (no newline yet)."""
        line, newline, _ = text.partition("\n")
        if not newline:
            return None
        try:
            fields = json.loads(line)
            return cls(
                pid=_optional(fields.get("pid"), int),
                hostname=_optional(fields.get("hostname"), str),
                started_at=_optional(fields.get("started_at"), str),
                http_address=_optional(fields.get("http_address"), str),
                agents_dir=_optional(fields.get("agents_dir"), str),
            )
        except (ValueError, AttributeError):
            return None

    def is_current(self) -> bool:
        """False for a record left by a dead process on this host (a new holder is about to overwrite it)."""
        if self.pid is None:
            return False
        if self.hostname != socket.gethostname():
            return True  # another host's processes cannot be checked from here
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, owned by another user
            pass
        return True


def _optional(value: object, kind: type[T]) -> T | None:
    return value if isinstance(value, kind) else None


class DataFolderLock:
    """The exclusive lock on a data folder; a context manager. Not reentrant: one per daemon."""

    def __init__(self, data_dir: Path, agents_dir: Path | None = None):
        self.data_dir = Path(data_dir)
        self.agents_dir = str(Path(agents_dir).resolve()) if agents_dir is not None else None
        self.path = self.data_dir / LOCK_FILE
        self.holder: Holder | None = None
        self._fd: int | None = None

    def acquire(self) -> Holder:
        """Lock the folder (creating it if needed) and record this process; DataFolderInUse if held."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this DataFolderLock")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock_within_grace(fd, fcntl.LOCK_EX)
        except BlockingIOError:
            holder = _read_current_holder(fd)
            os.close(fd)
            raise DataFolderInUse(
                str(self.data_dir),
                pid=holder.pid,
                host=holder.hostname,
                http_address=holder.http_address,
                since=holder.started_at,
                agents_dir=holder.agents_dir,
            ) from None
        self._fd = fd
        started = datetime.now(UTC).isoformat(timespec="seconds")
        self._write(
            Holder(
                pid=os.getpid(),
                hostname=socket.gethostname(),
                started_at=started,
                agents_dir=self.agents_dir,
            )
        )
        assert self.holder is not None
        return self.holder

    def set_http_address(self, address: str) -> None:
        """Record where this daemon serves HTTP (call once the port is bound) for `probe()` to find."""
        if self.holder is None:
            raise RuntimeError(f"{self.path} is not locked: acquire() first")
        self._write(replace(self.holder, http_address=address))

    def release(self) -> None:
        """Clear the record and unlock. The file stays (see the module docstring)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # closing drops the lock
            self._fd = None
            self.holder = None

    def _write(self, holder: Holder) -> None:
        assert self._fd is not None
        line = holder.to_line()
        # write, then cut: a concurrent reader sees the old or the new line, and reads up to the newline
        os.pwrite(self._fd, line, 0)
        os.ftruncate(self._fd, len(line))
        self.holder = holder

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def probe(data_dir: Path) -> Holder | None:
    """The daemon holding `data_dir`, or None when none does. Creates nothing and never blocks a holder."""
    try:
        fd = os.open(Path(data_dir) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            # a shared lock only succeeds when nobody holds the exclusive one; released at once below
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_current_holder(fd)
        return None
    finally:
        os.close(fd)


def _lock_within_grace(fd: int, kind: int) -> None:
    deadline = time.monotonic() + GRACE_SECONDS
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(_RETRY_EVERY)


def _read_current_holder(fd: int) -> Holder:
    """The locked file's record, waiting out a holder that has the lock but not yet its record written."""
    deadline = time.monotonic() + GRACE_SECONDS
    while True:
        holder = Holder.from_text(os.pread(fd, 4096, 0).decode(errors="replace"))
        if holder is not None and holder.is_current():
            return holder
        if time.monotonic() > deadline:
            return holder or Holder(pid=None, hostname=None, started_at=None)
        time.sleep(_RETRY_EVERY)
