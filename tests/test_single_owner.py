"""One owner per SQLite data folder (issue 12, part 1): real `agentd run` processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentd.store.folder_lock import probe
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess, free_port
from tests.support import agentd_cli as agentd

ASSISTANT = "purpose: You help.\nmemory: {scope: thread, persistent: true}\nchannels: {webhook: {}}\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text(ASSISTANT)
    return tmp_path


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


async def test_a_second_daemon_is_refused_before_it_touches_anything(root: Path) -> None:
    owner = await DaemonProcess(root).start()
    try:
        owner.say("hello")
        before = snapshot(root / "data")
        port = free_port()
        second = subprocess.run(
            [sys.executable, "-m", "agentd.cli", "run", "--port", str(port)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1
        assert f"pid {owner.proc.pid}" in second.stderr  # type: ignore[union-attr]
        assert owner.url in second.stderr
        assert snapshot(root / "data") == before  # nothing written, not even an audit event
        with httpx.Client() as client, pytest.raises(httpx.ConnectError):
            client.get(f"http://127.0.0.1:{port}/healthz")  # the port was never bound
        assert owner.say("still here")["reply"]
    finally:
        owner.stop()


async def test_after_kill_9_a_new_daemon_starts_at_once(root: Path) -> None:
    first = await DaemonProcess(root).start()
    first.say("remember city: Lisbon")
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    started = time.monotonic()
    second = await DaemonProcess(root).start()  # no stale lock to wait out or clean up
    try:
        assert time.monotonic() - started < 15
        holder = probe(root / "data")
        assert holder is not None and holder.pid == second.proc.pid  # type: ignore[union-attr]
        assert "Memory keys I hold: city" in second.say("hi")["reply"]
    finally:
        second.stop()


async def test_chat_beside_a_running_daemon_talks_to_it(root: Path) -> None:
    daemon = await DaemonProcess(root).start()
    try:
        chat = agentd(root, "chat", "assistant", "--session", "me", stdin="remember tea: green\nhello\n")
        assert chat.returncode == 0, chat.stderr
        assert "Remembered tea." in chat.stdout and f"the daemon at {daemon.url}" in chat.stdout
        # what chat remembered is at once what the daemon's prompt and inspector show
        status = daemon.get("/agents/assistant/status", conversation_key="repl:me")
        assert status["memory_keys"] == ["tea"] and status["totals"]["message_runs"] == 2
        assert "Memory keys I hold: tea" in daemon.say("and now?", conversation="other")["reply"]
        # the read-only commands work beside it, and say the same
        memories = agentd(root, "memories", "assistant", "--json")
        assert [m["key"] for m in json.loads(memories.stdout)] == ["tea"]
        inspect = agentd(root, "inspect", "assistant", "repl:me", "--json")
        assert inspect.returncode == 0, inspect.stderr
        layer = json.loads(inspect.stdout)["layers"][0]
        assert [m["parts"][0]["text"] for m in layer["messages"] if m["role"] == "user"] == [
            "remember tea: green",
            "hello",
        ]
    finally:
        daemon.stop()
    # with no daemon, chat runs the agent itself, on the same conversation
    alone = agentd(root, "chat", "assistant", "--session", "me", stdin="hello again\n")
    assert alone.returncode == 0, alone.stderr
    assert (
        "I see 4 earlier messages" in alone.stdout
    )  # remember (2: what was said, not the tool steps), hello (2)


async def test_a_daemon_stopped_by_sigterm_releases_the_folder(root: Path) -> None:
    daemon = await DaemonProcess(root).start()
    assert probe(root / "data") is not None
    daemon.stop()
    await wait_until(lambda: probe(root / "data") is None, "the lock to be released")
