"""A throwaway PostgreSQL server for tests and benchmarks: initdb into a temp folder, serve, stop, delete.

    with PostgresServer() as pg:                 # or: async with PostgresServer() as pg:
        pg.url()                                 # postgresql://postgres@127.0.0.1:<port>/agentd
        pg.create_database("t1")                 # another empty database, its URL
        pg.halt("immediate"); pg.resume()        # faults: a clean or an immediate (crash) shutdown,
        pg.crash_backend()                       # kill -9 of a server process: crash recovery

It runs the machine's own binaries (Debian's `postgresql` package; found with `pg_config --bindir`, else
the newest /usr/lib/postgresql/*/bin) on 127.0.0.1 at a free port, with its unix socket inside its
folder and trust authentication for the `postgres` role. Nothing else on the machine is used or needed.

PostgreSQL refuses to run as root, so when we are root (CI is) the server binaries run as the
`postgres` user through `setpriv`, which also gives them a parent-death signal: if the process that
started the server is killed (kill -9 of a test run), the server gets SIGINT and shuts down instead of
living on. Linux sends that signal when the *thread* that started it ends, so start the server from a
thread that outlives it (the main thread, or the event loop's: `__aenter__` launches it there).

Each folder holds an `owner.lock` that its creator keeps locked; a later start deletes folders whose
owner is gone (a test run killed before it could clean up).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from testkit.waiting import wait_until

SERVER_USER = "postgres"
FOLDER_PREFIX = "agentd-pg-"
OWNER_LOCK = "owner.lock"

# fsync=off: the folder is deleted after the run, so only an operating-system crash could tell the
# difference, and commits stop waiting on a disk that other jobs share. What a client can observe is
# unchanged: a commit is acknowledged after its WAL reached the OS, so killing the server (kill -9)
# still loses nothing acknowledged, and synchronous_commit stays on for the same reason.
TEST_SETTINGS: Mapping[str, str] = {"fsync": "off"}

START_TIMEOUT = 60.0  # seconds; a loaded 2-core machine can take a few to start a server
STOP_TIMEOUT = 30.0
PORT_ATTEMPTS = 5  # another process may take the free port between our probe and the server's bind
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresUnavailable(RuntimeError):
    """This machine cannot run a throwaway PostgreSQL server; the message says what to install."""


class PostgresStartError(RuntimeError):
    """The server did not come up; the message carries the end of its log."""


def find_bindir(pg_config: str = "pg_config", roots: Sequence[Path] = (Path("/usr/lib/postgresql"),)) -> Path:
    """The folder with `initdb` and `postgres`: `pg_config --bindir`, else the newest `<root>/<version>/bin`.

    Debian's libpq-dev ships a pg_config whose bindir may lack the server, so every candidate is checked.
    """
    candidates: list[Path] = []
    if exe := shutil.which(pg_config):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            answer = subprocess.run([exe, "--bindir"], capture_output=True, text=True, check=True, timeout=10)
            candidates.append(Path(answer.stdout.strip()))
    for root in roots:
        candidates += sorted(root.glob("*/bin"), key=_version_of, reverse=True)
    for folder in candidates:
        if all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "postgres", "psql")):
            return folder
    looked = ", ".join([f"`{pg_config} --bindir`", *(f"{root}/*/bin" for root in roots)])
    raise PostgresUnavailable(
        f"no PostgreSQL server binaries (initdb, postgres, psql) found; looked at {looked}. "
        "The PostgreSQL tests start their own server from them: install Debian's `postgresql` package "
        "(apt-get install postgresql), as .ci/run does."
    )


def _version_of(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name)) or (0,)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """The account the server runs as when we are root; None when we are not (it runs as us)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root, but there is no {SERVER_USER!r} user to run PostgreSQL as (it refuses root); "
            "Debian's `postgresql` package creates it: apt-get install postgresql"
        ) from None


def _server_command_prefix(user: pwd.struct_passwd | None) -> list[str]:
    """Run a server binary as `user`, with SIGINT (fast shutdown) when the thread that started it dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        if user is not None:
            raise PostgresUnavailable("running as root needs `setpriv` (util-linux) to start PostgreSQL")
        return []
    switch = (
        [] if user is None else ["--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--clear-groups"]
    )
    return [setpriv, *switch, "--pdeathsig", "INT", "--"]


def _client_env() -> dict[str, str]:
    """The environment for initdb/psql/pgbench: without PG* variables that could point them elsewhere."""
    return {name: value for name, value in os.environ.items() if not name.startswith("PG")}


def sweep_stale_folders(parent: Path) -> list[Path]:
    """Delete server folders under `parent` whose creator is gone and whose server has stopped."""
    removed = []
    for folder in parent.glob(FOLDER_PREFIX + "*"):
        try:
            fd = os.open(folder / OWNER_LOCK, os.O_RDONLY)
        except OSError:  # not created yet (its creator is between two calls), or not ours
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # its owner is alive
        try:
            if not _postmaster_alive(folder / "data"):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        finally:
            os.close(fd)
    return removed


def _postmaster_alive(data_dir: Path) -> bool:
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):  # no pid file, unreadable, or no such process
        return False
    return True


class PostgresServer:
    """One throwaway server: a sync and async context manager. Attributes are set once started."""

    def __init__(
        self,
        *,
        database: str = "agentd",
        settings: Mapping[str, str] = TEST_SETTINGS,
        parent: Path | None = None,
        bindir: Path | None = None,
    ):
        self.database = _checked_name(database)
        self.settings = dict(settings)
        self.parent = Path(parent or tempfile.gettempdir())
        self._bindir = bindir
        self.folder: Path | None = None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._owner_fd: int | None = None
        self._log_offset = 0
        self._attempts = 0

    # -- where it is -------------------------------------------------------------------------------

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = find_bindir()
        return self._bindir

    @property
    def data_dir(self) -> Path:
        return self._folder / "data"

    @property
    def log_path(self) -> Path:
        return self._folder / "server.log"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not started"
        return self.process.pid

    def url(self, database: str | None = None) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{database or self.database}"

    @property
    def _folder(self) -> Path:
        assert self.folder is not None, "the server is not started"
        return self.folder

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Self:
        try:
            self._prepare()
            self._launch()
            deadline = time.monotonic() + START_TIMEOUT
            while not self._ready(deadline):
                time.sleep(0.02)
            self.create_database(self.database)
        except BaseException:
            self.stop()
            raise
        return self

    async def start_async(self) -> Self:
        try:
            await asyncio.to_thread(self._prepare)
            self._launch()  # here, in the loop's thread: see the module docstring on the parent-death signal
            deadline = time.monotonic() + START_TIMEOUT
            # _ready raises its own error at the deadline, before wait_until's
            await wait_until(lambda: self._ready(deadline), "postgres to start", START_TIMEOUT + 5)
            await asyncio.to_thread(self.create_database, self.database)
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT: open transactions roll back, clients are disconnected), then delete the folder."""
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
            if self._owner_fd is not None:
                os.close(self._owner_fd)
                self._owner_fd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _prepare(self) -> None:
        """Sweep stale folders, make ours (locked, owned by the server user), initdb into it."""
        bindir = self.bindir  # fail with the install hint before touching anything
        user = _server_user()
        sweep_stale_folders(self.parent)
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=self.parent))
        self._owner_fd = os.open(self.folder / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._owner_fd, fcntl.LOCK_EX)
        if user is not None:
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        initdb = [str(bindir / "initdb"), "-D", str(self.data_dir), "-U", SERVER_USER, "--auth=trust"]
        # --no-sync: a crash during initdb only costs this throwaway folder
        initdb += ["--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"]
        done = subprocess.run(
            _server_command_prefix(user) + initdb,
            cwd=self.folder,  # the server user may not be able to enter our working directory
            env=_client_env(),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise PostgresStartError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    # -- faults ---------------------------------------------------------------------------------

    def halt(self, mode: str = "fast") -> None:
        """Stop the server, keeping its folder: `fast` (SIGINT: a clean shutdown) or `immediate`
        (SIGQUIT: no shutdown checkpoint, so the next start runs crash recovery, as after kill -9
        and a power cut: UNLOGGED tables come back empty). Started again by `resume`."""
        assert self.process is not None
        self.process.send_signal({"fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode])
        self.process.wait(STOP_TIMEOUT)

    def resume(self) -> None:
        """Start a halted server again on the same port (clients reconnect to the same URL)."""
        self._launch(port=self.port)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._ready(deadline):
            time.sleep(0.02)

    def restart(self, mode: str = "fast") -> None:
        self.halt(mode)
        self.resume()

    async def restart_async(self, mode: str = "fast") -> None:
        """`restart` without blocking the event loop (launched from the loop's thread, as start_async)."""
        await asyncio.to_thread(self.halt, mode)
        await self.resume_async()

    async def resume_async(self) -> None:
        """`resume` without blocking the event loop (launched from the loop's thread)."""
        self._launch(port=self.port)
        deadline = time.monotonic() + START_TIMEOUT
        await wait_until(lambda: self._ready(deadline), "postgres to start again", START_TIMEOUT + 5)

    def crash_backend(self) -> None:
        """kill -9 one of the server's processes (its checkpointer): the postmaster ends every other
        one, runs crash recovery (UNLOGGED tables emptied) and accepts connections again; returns
        once it does."""
        pid = int(self.psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").strip())
        offset = self.log_path.stat().st_size
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            if "all server processes terminated; reinitializing" in text and (
                "database system is ready to accept connections" in text
            ):
                return
            if time.monotonic() > deadline:
                raise PostgresStartError(f"postgres did not recover in {START_TIMEOUT:g}s:\n{text[-4000:]}")
            time.sleep(0.02)

    def _launch(self, port: int | None = None) -> None:
        self._attempts += 1
        self.port = port or free_port()
        command = [str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        command += ["-h", "127.0.0.1", "-k", str(self._folder)]  # TCP on loopback; socket in our folder
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                _server_command_prefix(_server_user()) + command,
                cwd=self.folder,
                env=_client_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _ready(self, deadline: float) -> bool:
        """True once the server accepts connections; relaunches on a lost port race; raises on failure."""
        assert self.process is not None
        if self.process.poll() is not None:
            log = self._log_since_launch()
            if "Address already in use" in log and self._attempts < PORT_ATTEMPTS:
                self._launch()
                return False
            raise PostgresStartError(f"postgres exited with {self.process.returncode} while starting:\n{log}")
        if time.monotonic() > deadline:
            raise PostgresStartError(
                f"postgres did not start in {START_TIMEOUT:g}s:\n{self._log_since_launch()}"
            )
        # the postmaster writes "ready" as the 8th line of its pid file once it accepts connections
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return len(lines) >= 8 and lines[7].strip() == "ready"

    def _log_since_launch(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")[-4000:]

    # -- databases --------------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self.psql(f'CREATE DATABASE "{_checked_name(name)}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still connected to it."""
        self.psql(f'DROP DATABASE IF EXISTS "{_checked_name(name)}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL through psql on the server's unix socket; return its unaligned output."""
        command = [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        where = ["-h", str(self._folder), "-p", str(self.port), "-U", SERVER_USER, "-d", database]
        command += [*where, "-c", sql]
        done = subprocess.run(command, env=_client_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed ({done.returncode}) running {sql!r}: {done.stderr.strip()}")
        return done.stdout


def _checked_name(name: str) -> str:
    if not _DATABASE_NAME.fullmatch(name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _ (at most 63)")
    return name
