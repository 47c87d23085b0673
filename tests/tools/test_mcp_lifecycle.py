"""MCP servers' lifecycle under a running daemon: a server stuck in `initialize` is stopped the SDK's way
(its scope cancelled; stdin closed, terminated, killed) when its agent is removed or edited, and the
daemon's reload loop and shutdown go on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.daemon import Daemon
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess

# A stdio "server" that reads initialize and never answers, and outlives its stdin closing: only a
# signal stops it. It writes its pid to the file named by its argument.
SILENT = """\
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
for _ in sys.stdin:
    pass
time.sleep(3600)
"""
WEBHOOK = "purpose: Help.\nchannels: {webhook: {}}\n"


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """The file the silent servers write their pids to; any survivor is killed at the end (never leaked)."""
    path = tmp_path / "pids"
    yield path
    for pid in started(path):
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)  # each server leads its own process group (the SDK's spawn)


def started(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def stuck_agent(script: Path, pids: Path, tag: str) -> str:
    server = {
        "command": [sys.executable, str(script), str(pids)],
        "env": {"TAG": tag},
        "connect_timeout_s": 1,
    }
    return WEBHOOK + f"tools: {json.dumps({'mcp': {'stuck': server}})}\n"


async def audited(daemon: Daemon, action: str, timeout: float = 20.0) -> list[str]:
    """The `stuck` agent's config events, once `action` is among them."""
    deadline = time.monotonic() + timeout
    while True:
        actions = [e["action"] for e in await daemon.query_audit("stuck", "config", None, 100)]
        if action in actions:
            return actions
        assert time.monotonic() < deadline, f"timed out waiting for {action!r} to be audited: {actions}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("change", ["removed", "reloaded"])
async def test_a_server_stuck_in_initialize_is_stopped_and_the_reload_goes_on(
    tmp_path: Path, pids: Path, change: str
) -> None:
    # Before the fix a stop during initialize was a native task.cancel(); the connect timeout's own
    # cancellation then landed in the SDK's shielded shutdown and aborted it: the reload loop hung.
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "stuck.yaml").write_text(stuck_agent(script, pids, "a"))
    daemon = Daemon(agents, tmp_path / "data", reload_interval=0.05)
    await daemon.start()
    try:
        [first] = await wait_until(lambda: started(pids), "the server to start")
        if change == "removed":
            (agents / "stuck.yaml").unlink()
        else:
            (agents / "stuck.yaml").write_text(stuck_agent(script, pids, "b"))  # its server changed
        assert await audited(daemon, change) == ["loaded", change]
        assert not alive(first), "the stopped server's process is gone"
        (agents / "later.yaml").write_text(WEBHOOK)  # the reload loop goes on: a later file loads
        await wait_until(lambda: "later" in daemon.fleet.entries, "a later agent file to load")
    finally:
        await asyncio.wait_for(daemon.shutdown(), 20)
    assert [pid for pid in started(pids) if alive(pid)] == [], "no server outlives the daemon"


@pytest.mark.slow
async def test_sigterm_stops_agentd_after_a_stuck_server_was_removed(tmp_path: Path, pids: Path) -> None:
    # the issue as an operator met it: `agentd run`, the agent file removed while its server is in
    # initialize, then SIGTERM: agentd exits (one signal), and the server is not orphaned
    script = tmp_path / "silent.py"
    script.write_text(SILENT)
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "stuck.yaml").write_text(stuck_agent(script, pids, "a"))
    daemon = await DaemonProcess(tmp_path, reload_interval=0.05).start()
    try:
        await wait_until(lambda: started(pids), "the server to start")
        (tmp_path / "agents" / "stuck.yaml").unlink()
        (tmp_path / "agents" / "later.yaml").write_text(WEBHOOK)
        await wait_until(
            lambda: "later" in [a["name"] for a in daemon.get("/agents")["agents"]],
            "a later file to load",
            20,
        )
        assert daemon.stop() == 0
    finally:
        daemon.kill()
    assert [pid for pid in started(pids) if alive(pid)] == [], "no server outlives the daemon"
