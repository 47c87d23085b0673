"""One daemon per data folder: the lock file, with real processes holding it and being killed."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agentd.errors import DataFolderInUse, OperatorError
from agentd.store.folder_lock import LOCK_FILE, DataFolderLock, probe

ADDRESS = "http://127.0.0.1:18765"

# Locks the folder, says where it serves, optionally starts a child that inherits every inheritable
# descriptor, reports, then waits to be killed.
HOLDER = """\
import pathlib, subprocess, sys, time
from agentd.store.folder_lock import DataFolderLock
lock = DataFolderLock(pathlib.Path(sys.argv[1]))
lock.acquire()
lock.set_http_address(sys.argv[2])
child = subprocess.Popen(["sleep", "120"], close_fds=False) if sys.argv[3] == "child" else None
print(child.pid if child else 0, flush=True)
time.sleep(120)
"""

# Tries to take the folder the way a second daemon would, and prints what it was told.
CONTENDER = """\
import pathlib, sys
from agentd.errors import DataFolderInUse
from agentd.store.folder_lock import DataFolderLock
try:
    DataFolderLock(pathlib.Path(sys.argv[1])).acquire()
except DataFolderInUse as refused:
    print(refused)
    sys.exit(3)
"""


class HolderProcess:
    def __init__(self, data: Path, with_child: bool = False):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(data), ADDRESS, "child" if with_child else "none"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.child_pid = int(self.proc.stdout.readline())  # printed once the lock and address are set

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill_9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def holders() -> Iterator[list[HolderProcess]]:
    started: list[HolderProcess] = []
    yield started
    for holder in started:
        if holder.proc.poll() is None:
            holder.kill_9()
        if holder.child_pid:
            os.kill(holder.child_pid, signal.SIGKILL)


def test_a_second_process_is_refused_naming_the_holders_pid_and_address(
    tmp_path: Path, holders: list[HolderProcess]
) -> None:
    data = tmp_path / "data"
    holder = HolderProcess(data)
    holders.append(holder)
    contender = subprocess.run(
        [sys.executable, "-c", CONTENDER, str(data)], capture_output=True, text=True, timeout=60
    )
    assert contender.returncode == 3, contender.stderr
    assert f"pid {holder.pid} on {socket.gethostname()}, serving {ADDRESS}" in contender.stdout
    assert f"data folder {data} is in use by another agentd" in contender.stdout

    with pytest.raises(DataFolderInUse) as refused:
        DataFolderLock(data).acquire()
    assert isinstance(refused.value, OperatorError)
    assert (refused.value.pid, refused.value.http_address) == (holder.pid, ADDRESS)


def test_kill_9_of_the_holder_frees_the_folder_at_once_even_with_its_child_alive(
    tmp_path: Path, holders: list[HolderProcess]
) -> None:
    data = tmp_path / "data"
    holder = HolderProcess(data, with_child=True)
    holders.append(holder)
    holder.kill_9()
    os.kill(holder.child_pid, 0)  # the child it started is still running
    assert probe(data) is None  # the dead holder's record is still in the file, and means nothing
    with DataFolderLock(data) as lock:  # no retry, no cleanup step: the kernel dropped the lock
        assert lock.holder is not None and lock.holder.pid == os.getpid()
        found = probe(data)
        assert found is not None and (found.pid, found.http_address) == (os.getpid(), None)


def test_the_probe_sees_the_holder_and_nothing_once_it_is_gone(
    tmp_path: Path, holders: list[HolderProcess]
) -> None:
    data = tmp_path / "data"
    assert probe(data) is None
    assert not data.exists()  # probing creates nothing
    holder = HolderProcess(data)
    holders.append(holder)
    found = probe(data)
    assert found is not None
    assert (found.pid, found.hostname, found.http_address) == (holder.pid, socket.gethostname(), ADDRESS)
    assert found.started_at is not None and datetime.fromisoformat(found.started_at).tzinfo is not None
    holder.proc.terminate()  # SIGTERM: Python's default handler ends the process without cleanup code
    holder.proc.wait()
    assert probe(data) is None


def test_in_one_process_a_second_lock_is_refused_and_release_hands_the_folder_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = DataFolderLock(data)
    with pytest.raises(RuntimeError, match="acquire"):
        first.set_http_address(ADDRESS)
    first.acquire()
    with pytest.raises(DataFolderInUse, match=f"pid {os.getpid()} .*HTTP address not bound yet"):
        DataFolderLock(data).acquire()
    first.set_http_address(ADDRESS)
    with pytest.raises(DataFolderInUse, match=f"serving {ADDRESS}"):
        DataFolderLock(data).acquire()
    first.release()
    assert probe(data) is None
    assert (data / LOCK_FILE).read_text() == ""  # the file stays; only its record goes
    with DataFolderLock(data):
        pass


def test_a_probe_in_progress_does_not_make_a_starting_daemon_fail(tmp_path: Path) -> None:
    """A probe's shared lock lasts microseconds; a daemon starting in that moment waits it out."""
    data = tmp_path / "data"
    data.mkdir()
    fd = os.open(data / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe, frozen in the middle of its check
    unlock = threading.Timer(0.05, lambda: os.close(fd))
    unlock.start()
    try:
        with DataFolderLock(data) as lock:
            assert lock.holder is not None
    finally:
        unlock.join()
