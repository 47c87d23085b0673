"""A throwaway PgBouncer in front of a testkit PostgreSQL server: a generated ini, a free port, stopped after.

    with PgBouncer(pg, pool_mode="transaction") as bouncer:
        bouncer.url("agentd")        # postgresql://postgres@127.0.0.1:<port>/agentd, through the pooler

It runs the machine's own binary (Debian's `pgbouncer` package: /usr/sbin/pgbouncer), with trust
authentication for the `postgres` role, like the server behind it. PgBouncer refuses to run as root,
so when we are root (CI is) it runs as the server's user through `setpriv`, with the same parent-death
signal as the server (testkit/postgres.py says why).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from testkit.postgres import PostgresServer, _server_command_prefix, _server_user, free_port

START_TIMEOUT = 30.0


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


class PgBouncer:
    def __init__(self, server: PostgresServer, *, pool_mode: str = "session", pool_size: int = 4):
        self.server = server
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = 0
        self.folder: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> Self:
        binary = find_pgbouncer()
        if binary is None:
            raise RuntimeError("no pgbouncer binary: apt-get install pgbouncer (as .ci/run does)")
        self.folder = Path(tempfile.mkdtemp(prefix="agentd-pgbouncer-"))
        self.port = free_port()
        (self.folder / "users.txt").write_text('"postgres" ""\n')
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.server.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.folder / 'users.txt'}\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = {self.pool_size}\nmax_client_conn = 200\n"
            f"logfile = {self.folder / 'pgbouncer.log'}\n"
        )
        user = _server_user()
        if user is not None:
            for path in (self.folder, *self.folder.iterdir()):
                os.chown(path, user.pw_uid, user.pw_gid)
        self.process = subprocess.Popen(
            [*_server_command_prefix(user), binary, str(ini)],
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while "process up" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not start:\n{self.log()}")
            time.sleep(0.02)
        return self

    def log(self) -> str:
        assert self.folder is not None
        try:
            return (self.folder / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
