"""What the daemon logs: one INFO line per run, the run id on every line of a run, JSON lines with fixed
keys, and a startup line naming the agents served and, apart, those rejected with their errors."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.cli.logs import JSON_KEYS, configure_logging
from agentd.daemon import Daemon
from agentd.errors import ProviderError
from agentd.http.app import create_app
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess

EPISODIC = "memory:\n  strategy: {kind: episodic}\nchannels: {webhook: {}}\n"


class DownEmbedder:
    """An embedder whose server is unreachable: recall logs a warning in the middle of the turn."""

    id = "down/embedder"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderError("connection refused", provider="down", model="embedder", unreachable=True)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """agentd's JSON logging, into a buffer, as `agentd run --log-format json` sets it up."""
    buffer = io.StringIO()
    root = logging.getLogger()
    level = root.level
    configure_logging("info", "json", stream=buffer, force=True)
    yield buffer
    for handler in [h for h in root.handlers if getattr(h, "stream", None) is buffer]:
        root.removeHandler(handler)
    root.setLevel(level)


def parsed(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


async def test_each_run_logs_one_line_and_its_id_is_on_every_line_of_it(
    tmp_path: Path, log_lines: io.StringIO
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "episodic.yaml").write_text(EPISODIC)
    daemon = Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60, embedder=DownEmbedder())
    await daemon.start()
    try:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            r = await client.post("/agents/episodic/messages", json={"conversation_id": "c", "text": "hi"})
            run_id = r.json()["run_id"]
            await wait_until(lambda: daemon.agent("episodic").in_flight == 0, "the work after the run")  # type: ignore[union-attr]
    finally:
        await daemon.shutdown()
    lines = parsed(log_lines)
    assert lines and all(tuple(line) == JSON_KEYS for line in lines)
    runs = [line for line in lines if line["logger"] == "agentd.runs"]
    [run] = [line for line in runs if line["run_id"] == run_id]
    assert run["level"] == "info" and run["message"].startswith("run agent=episodic conversation=webhook:c")
    data = run["data"]
    assert (data["agent"], data["conversation"], data["trigger"], data["outcome"]) == (
        "episodic",
        "webhook:c",
        "message",
        "ok",
    )
    assert data["tokens_in"] > 0 and data["tokens_out"] > 0 and data["duration_ms"] >= 0
    # the embedder's warning names no run itself: the line still carries the run's id
    [warning] = [line for line in lines if "embedder down/embedder failed" in line["message"]][:1]
    assert warning["level"] == "warning" and warning["run_id"] == run_id
    assert run_id not in warning["message"]


async def test_a_failed_run_says_why_on_its_line(tmp_path: Path, log_lines: io.StringIO) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "remote.yaml").write_text("model: openai/gpt-x\nchannels: {webhook: {}}\n")
    (tmp_path / "agentd.yaml").write_text(
        "providers:\n  openai: {kind: openai, api_key: k, base_url: 'http://127.0.0.1:9/v1', max_retries: 0}\n"
    )
    daemon = Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60)
    await daemon.start()
    try:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            r = await client.post("/agents/remote/messages", json={"conversation_id": "c", "text": "hi"})
    finally:
        await daemon.shutdown()
    [run] = [line for line in parsed(log_lines) if line["logger"] == "agentd.runs"]
    assert run["run_id"] == r.json()["run_id"]
    assert run["data"]["outcome"] == "error" and "provider openai" in run["data"]["error"]
    assert "outcome=error" in run["message"] and 'error="provider openai' in run["message"]


async def test_the_daemon_logs_json_with_the_agents_served_and_rejected(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("channels: {webhook: {}}\n")
    (tmp_path / "agents" / "broken.yaml").write_text("purpose: x\nmodle: offline\n")
    daemon = await DaemonProcess(tmp_path, args=("--log-format", "json", "--log-level", "info")).start()
    try:
        reply = daemon.say("hello")
    finally:
        assert daemon.stop() == 0
    lines = [json.loads(line) for line in daemon.log.read_text().splitlines()]
    assert all(tuple(line) == JSON_KEYS for line in lines)
    [startup] = [line for line in lines if line["message"].startswith("listening on ")]
    assert startup["level"] == "warning"  # an agent was rejected
    assert startup["data"]["served"] == ["assistant"]
    assert list(startup["data"]["rejected"]) == ["broken"]
    assert "broken.yaml:2:1: unknown key 'modle'" in startup["data"]["rejected"]["broken"]
    assert "serving 1 agent: assistant; rejected 1 agent: broken (" in startup["message"]
    [run] = [line for line in lines if line["logger"] == "agentd.runs"]
    assert run["run_id"] == reply["run_id"] and run["data"]["agent"] == "assistant"


async def test_text_lines_name_the_run_and_the_level_is_honoured(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("channels: {webhook: {}}\n")
    daemon = await DaemonProcess(tmp_path, args=("--log-level", "info")).start()
    try:
        reply = daemon.say("hello")
    finally:
        daemon.stop()
    text = daemon.log.read_text()
    assert f"INFO agentd.runs [run {reply['run_id']}]: run agent=assistant conversation=webhook:c1" in text
    assert "listening on http://127.0.0.1:" in text and "serving 1 agent: assistant" in text

    quiet = tmp_path / "quiet"
    (quiet / "agents").mkdir(parents=True)
    (quiet / "agents" / "assistant.yaml").write_text("channels: {webhook: {}}\n")
    daemon = await DaemonProcess(quiet, args=("--log-level", "warning")).start()
    try:
        daemon.say("hello")
    finally:
        daemon.stop()
    assert " INFO " not in daemon.log.read_text()


async def test_uvicorns_own_records_are_json_lines_too_and_the_last_line_says_stopped(tmp_path: Path) -> None:
    """uvicorn wrote its records (a malformed request, its tracebacks) with its own handlers, as raw text
    into the JSON stream (issue 17, item 20); the daemon ends with a line saying it stopped (item 24)."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "assistant.yaml").write_text("channels: {webhook: {}}\n")
    daemon = await DaemonProcess(tmp_path, args=("--log-format", "json")).start()
    try:
        with socket.create_connection(("127.0.0.1", daemon.port)) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            sock.recv(1024)  # uvicorn answers 400 and logs the request as invalid
        await wait_until(lambda: "Invalid HTTP request" in daemon.log.read_text(), "uvicorn's warning")
    finally:
        assert daemon.stop() == 0
    lines = [json.loads(line) for line in daemon.log.read_text().splitlines()]  # every line parses
    [invalid] = [line for line in lines if "Invalid HTTP request" in line["message"]]
    assert invalid["logger"] == "uvicorn.error" and invalid["level"] == "warning"
    assert tuple(lines[-1]) == JSON_KEYS
    assert lines[-1]["message"] == "stopped: in-flight runs drained, every agent's data closed"


def test_with_json_lines_nothing_else_writes_raw_into_the_stream() -> None:
    """A warning, an exception in a thread and one nobody caught in the main thread: JSON lines."""
    code = (
        "import threading, warnings\n"
        "from agentd.cli.logs import configure_logging, log_uncaught\n"
        "configure_logging('info', 'json'); log_uncaught()\n"
        "t = threading.Thread(target=lambda: 1 / 0, name='worker'); t.start(); t.join()\n"
        "warnings.warn('mind the gap')\n"
        "raise RuntimeError('boom')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(line["level"], line["message"].splitlines()[0]) for line in lines] == [
        ("error", "uncaught exception in thread worker"),
        ("warning", lines[1]["message"].splitlines()[0]),
        ("critical", "uncaught exception"),
    ]
    assert "ZeroDivisionError" in lines[0]["error"] and "RuntimeError: boom" in lines[2]["error"]
    assert "mind the gap" in lines[1]["message"] and lines[1]["logger"] == "py.warnings"
