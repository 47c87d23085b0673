"""`agentd run` as a real subprocess on a free loopback port, for the tests that need the whole daemon."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from testkit.waiting import wait_until

START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DaemonProcess:
    """Started in `root` (agents/ and agentd.yaml there), logging to root/daemon.log; restartable."""

    def __init__(
        self,
        root: Path,
        *,
        reload_interval: float = 0.2,
        headers: dict[str, str] | None = None,
        open_files: tuple[int, int] | None = None,
        args: tuple[str, ...] = (),
    ):
        """`open_files`: the (soft, hard) RLIMIT_NOFILE the daemon starts with (as `prlimit` would set);
        `args`: more options of `agentd run` (--log-format json, ...)."""
        self.args = args
        self.root = root
        self.open_files = open_files
        self.port = free_port()
        self.reload_interval = reload_interval
        self.headers = headers or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "daemon.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> DaemonProcess:
        self._spawn()
        await wait_until(self._healthy, "the daemon to answer /healthz", START_TIMEOUT)
        return self

    def _spawn(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("AGENTD_MODEL", None)
        command = [
            "run",
            "--port",
            str(self.port),
            "--reload-interval",
            str(self.reload_interval),
            *self.args,
        ]
        limits = self.open_files

        def set_limits() -> None:
            if limits is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)

        with self.log.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentd.cli", *command],
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=set_limits if limits is not None else None,
            )

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited: {self.log.read_text()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def say(
        self, text: str, conversation: str = "c1", agent: str = "assistant", user_id: str | None = None
    ) -> dict[str, Any]:
        body = {"conversation_id": conversation, "text": text}
        if user_id is not None:
            body["user_id"] = user_id
        r = httpx.post(f"{self.url}/agents/{agent}/messages", json=body, headers=self.headers, timeout=10)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def get(self, path: str, **params: str) -> dict[str, Any]:
        r = httpx.get(f"{self.url}{path}", params=params, headers=self.headers, timeout=10)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the daemon and return its exit code; one that does not exit in time is killed."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"daemon did not exit within {STOP_TIMEOUT:g}s of signal {sig}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
