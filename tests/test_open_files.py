"""Agent files opened on demand: at most a cap open, idle ones closed, migrated at first open, and
running out of descriptors fails one call (under a real limit, in a child process), never the rest."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.store.queries import Memories, MemoryKeys
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.sqlite.files import fitting_cap
from agentd.store.sqlite.migrations import MIGRATIONS, applied, migrate
from agentd.store.sqlite.store import connect
from agentd.store.writes import UpsertMemory

ROOT = Path(__file__).resolve().parent.parent


def remember(value: str) -> UpsertMemory:
    return UpsertMemory("", "k", value, None, 1.0)


def descriptors_under(folder: Path) -> int:
    """This process's open descriptors on files in `folder` (the file, -wal and -shm of each)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith(str(folder))
        except OSError:
            continue  # closed since the listing
    return count


async def test_at_most_the_cap_of_files_is_open_and_a_closed_one_reopens_intact(tmp_path: Path) -> None:
    executor = StoreExecutor(max_open_files=3)
    stores = [SqliteStore(tmp_path / f"a{i}.sqlite", executor) for i in range(10)]
    try:
        for store in stores:
            await store.open()
        assert descriptors_under(tmp_path) == 0  # open() touches no file
        for i, store in enumerate(stores):
            await store.write(remember(f"v{i}"))
            assert executor.files.stats()["open"] <= 3
            assert descriptors_under(tmp_path) <= 3 * 3
        for i, store in enumerate(stores):  # in the same order: each was closed again since
            assert [m["value"] for m in await store.read(Memories())] == [f"v{i}"]
        stats = executor.files.stats()
        assert stats["open"] == 3 and stats["opened"] == 20 and stats["closed_lru"] == 17
    finally:
        for store in stores:
            await store.close()
        executor.shutdown()
    assert descriptors_under(tmp_path) == 0


async def test_idle_files_are_closed_and_reopen_on_their_next_use(tmp_path: Path) -> None:
    executor = StoreExecutor(close_idle_after_s=0)  # everything used before now counts as idle
    store = SqliteStore(tmp_path / "a.sqlite", executor)
    try:
        await store.open()
        await store.write(remember("v"))
        assert descriptors_under(tmp_path) > 0
        assert await executor.close_idle_files() == 1
        assert descriptors_under(tmp_path) == 0 and executor.files.stats()["closed_idle"] == 1
        assert await store.read(MemoryKeys()) == {"": ["k"]}
    finally:
        await store.close()
        executor.shutdown()


async def test_an_older_file_is_migrated_at_its_first_use_not_at_open(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = connect(path)
    migrate(conn, MIGRATIONS[:1])
    conn.close()
    executor = StoreExecutor()
    store = SqliteStore(path, executor)
    try:
        assert await store.open() == []
        with sqlite3.connect(path) as peek:
            assert applied(peek) == [MIGRATIONS[0][0]]
        assert await store.read(MemoryKeys()) == {}
        with sqlite3.connect(path) as peek:
            assert applied(peek) == [name for name, _ in MIGRATIONS]
    finally:
        await store.close()
        executor.shutdown()


def test_the_cap_leaves_descriptors_for_everything_else() -> None:
    assert fitting_cap(256, 1024) == 256  # the default fits the common limit
    assert fitting_cap(256, 100) == 22  # 100 - 32 spare, 3 each
    assert fitting_cap(256, 20) == 1


# Run in a child process: it lowers its own descriptor limit, then takes every descriptor left.
OUT_OF_DESCRIPTORS = """
import asyncio, json, os, resource, sys
from pathlib import Path
from agentd.errors import StoreError
from agentd.store.queries import Memories, MemoryKeys
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.writes import UpsertMemory

def hog():
    taken = []
    try:
        while True:
            taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        return taken

async def main(folder):
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    executor = StoreExecutor(max_open_files=10)
    stores = [SqliteStore(folder / f"s{i}.sqlite", executor) for i in range(8)]
    out = {}
    for store in stores:
        await store.open()
    for store in stores[:6]:
        await store.write(UpsertMemory("", "k", "v", None, 1.0))
    taken = hog()
    # no descriptor left: opening a 7th file closes half of the open ones, keeps fewer open, goes on
    await stores[6].write(UpsertMemory("", "k", "v", None, 1.0))
    out["shed"] = executor.files.stats()
    for store in stores:
        await store.close()
    taken += hog()
    # none of ours left to close: the one call fails, saying why
    try:
        await stores[7].read(MemoryKeys())
    except StoreError as e:
        out["error"] = str(e)
    for fd in taken:
        os.close(fd)
    out["after"] = await stores[7].read(MemoryKeys())
    out["kept"] = await stores[0].read(MemoryKeys())
    await stores[7].close()
    await stores[0].close()
    executor.shutdown()
    print(json.dumps(out))

asyncio.run(main(Path(sys.argv[1])))
"""


def test_out_of_descriptors_closes_files_and_else_fails_only_that_call(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["shed"]["descriptor_shortages"] == 1
    # 6 were open: at most 3 from now on, so 4 closed and the 7th opened
    assert out["shed"]["open"] == 3 and out["shed"]["max_open"] == 3 and out["shed"]["closed_lru"] == 4
    assert "out of file descriptors" in out["error"] and "limit 64" in out["error"]
    assert "s7.sqlite" in out["error"]
    assert out["after"] == {} and out["kept"] == {"": ["k"]}
