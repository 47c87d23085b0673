"""The throwaway PostgreSQL server tests use: starts, serves real clients, stops, leaves nothing behind."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pytest

from testkit import postgres
from testkit.postgres import PostgresServer, PostgresUnavailable, find_bindir, sweep_stale_folders
from testkit.waiting import wait_until


def running(pid: int) -> bool:
    """True while `pid` is a live process (a zombie nobody reaped yet does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A parent folder the `postgres` user can enter (pytest's tmp_path is root-only when we are root)."""
    parent = Path(tempfile.mkdtemp(prefix="agentd-pgtest-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def test_sync_server_serves_psycopg_and_cleans_up_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), PostgresServer() as pg:
        with psycopg.connect(pg.url()) as conn:
            assert conn.execute("SELECT current_database(), 6 * 7").fetchone() == ("agentd", 42)
            assert conn.execute("SHOW fsync").fetchone() == ("off",)
        pid, folder, workers = pg.pid, pg.folder, children_of(pg.pid)
        assert folder is not None and (folder / "data" / "PG_VERSION").exists()
        assert workers, "a running postmaster has background workers"
        if os.geteuid() == 0:  # PostgreSQL refuses root, so it runs as the postgres user
            assert uid_of(pid) == pwd.getpwnam("postgres").pw_uid
        assert folder not in sweep_stale_folders(pg.parent)  # a live server's folder is left alone
        raise RuntimeError("the test failed")
    assert not running(pid)
    assert not [worker for worker in workers if running(worker)]
    assert not folder.exists()


async def test_async_server_serves_asyncpg_and_leaves_nothing_behind() -> None:
    async with PostgresServer(database="other") as pg:
        conn = await asyncpg.connect(pg.url())
        try:
            assert await conn.fetchval("SELECT current_database()") == "other"
        finally:
            await conn.close()
        pid, folder = pg.pid, pg.folder
        assert folder is not None
    assert not running(pid)
    assert not folder.exists()


def test_settings_are_the_callers(open_parent: Path) -> None:
    """The benchmark runs with PostgreSQL's defaults; only the given settings change."""
    with PostgresServer(settings={"max_connections": "42"}, parent=open_parent) as pg:
        assert pg.psql("SHOW fsync").strip() == "on"
        assert pg.psql("SHOW max_connections").strip() == "42"
        assert pg.folder is not None and pg.folder.parent == open_parent


def test_a_lost_port_race_starts_again_on_another_port(
    monkeypatch: pytest.MonkeyPatch, open_parent: Path
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1], postgres.free_port()])
    monkeypatch.setattr(postgres, "free_port", lambda: next(ports))
    try:
        with PostgresServer(parent=open_parent) as pg:
            assert pg.port != taken.getsockname()[1]
            assert pg.psql("SELECT 1").strip() == "1"
            assert "Address already in use" in pg.log_path.read_text()
    finally:
        taken.close()


def test_each_test_database_is_fresh_and_dropping_it_disconnects_clients(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
        assert conn.execute("SELECT current_database()").fetchone() != (postgres_server.database,)
    url = postgres_server.create_database("scratch")
    held = psycopg.connect(url)  # still connected when the database is dropped
    held.execute("CREATE TABLE t (x int)")
    held.commit()
    postgres_server.drop_database("scratch")
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(url)
    held.close()


def test_missing_binaries_fail_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, open_parent: Path
) -> None:
    (tmp_path / "16" / "bin").mkdir(parents=True)  # a version folder without the server binaries
    with pytest.raises(PostgresUnavailable, match=r"apt-get install postgresql") as caught:
        find_bindir(pg_config="no-such-pg_config", roots=[tmp_path])
    assert str(tmp_path) in str(caught.value)

    monkeypatch.setattr(postgres, "find_bindir", lambda: find_bindir("no-such-pg_config", [tmp_path]))
    with pytest.raises(PostgresUnavailable, match=r"apt-get install postgresql"):
        PostgresServer(parent=open_parent).start()
    assert list(open_parent.iterdir()) == []  # refused before making a folder


OWNER = """\
import pathlib, sys, time
from testkit.postgres import PostgresServer
pg = PostgresServer(parent=pathlib.Path(sys.argv[1])).start()
print(pg.pid, pg.folder, flush=True)
time.sleep(120)
"""


def start_owner(parent: Path) -> tuple[subprocess.Popen[str], int, Path]:
    """A process that starts a server in `parent` and then just waits (to be killed)."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(parent)], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    pid, folder = owner.stdout.readline().split()
    return owner, int(pid), Path(folder)


async def test_killing_the_owner_takes_its_server_down_and_a_sweep_deletes_the_folder(
    open_parent: Path,
) -> None:
    owner, server_pid, folder = start_owner(open_parent)
    try:
        assert running(server_pid) and folder.exists()
        assert sweep_stale_folders(open_parent) == []  # its owner is alive
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    await wait_until(lambda: not running(server_pid), "the orphaned server to shut down", timeout=30)
    assert sweep_stale_folders(open_parent) == [folder]
    assert not folder.exists()
