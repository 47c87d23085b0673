"""The daemon as a whole: agents that cannot start fail alone, and the daemon's own lifecycle."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.daemon.server import bind
from agentd.errors import OperatorError
from agentd.http.app import create_app
from agentd.store.sqlite.migrations import MIGRATIONS, migrate
from agentd.store.sqlite.store import connect

WEBHOOK = "channels: {webhook: {}}\n"


def newer_data_file(path: Path) -> None:
    """A data file as a newer agentd leaves it: one migration this agentd does not know."""
    conn = connect(path)
    migrate(conn, [*MIGRATIONS, ("9999_from_the_future", ("CREATE TABLE future (x)",))])
    conn.close()


async def test_a_data_file_from_a_newer_agentd_fails_that_agent_alone(tmp_path: Path) -> None:
    # Data files are opened at an agent's first use, not at start: the newer file is found then.
    (tmp_path / "agents").mkdir()
    for name in ("good", "newer"):
        (tmp_path / "agents" / f"{name}.yaml").write_text(WEBHOOK)
    newer_data_file(tmp_path / "data" / "newer.sqlite")
    async with Daemon(tmp_path / "agents", tmp_path / "data", reload_interval=60) as daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            agents = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
            assert [(agents[n]["status"], agents[n]["data"]) for n in ("good", "newer")] == [
                ("running", "unopened"),
                ("running", "unopened"),
            ]
            refused = await client.post("/agents/newer/messages", json={"conversation_id": "c", "text": "hi"})
            assert refused.status_code == 503
            assert "newer agentd" in refused.json()["error"] and "upgrade agentd" in refused.json()["error"]
            answer = await client.post("/agents/good/messages", json={"conversation_id": "c", "text": "hi"})
            assert answer.status_code == 200 and "You said: hi" in answer.json()["reply"]
            agents = {a["name"]: a for a in (await client.get("/agents")).json()["agents"]}
            assert (agents["good"]["status"], agents["good"]["data"]) == ("running", "ready")
            assert (agents["newer"]["status"], agents["newer"]["data"]) == ("error", "failed")
            assert "newer agentd" in agents["newer"]["last_error"]
            assert "upgrade agentd" in agents["newer"]["last_error"]
            again = await client.post("/agents/newer/messages", json={"conversation_id": "c", "text": "hi"})
            assert again.status_code == 503 and "upgrade agentd" in again.json()["error"]
            query = {"agent": "newer", "kind": "config"}
            audit = (await client.get("/audit", params=query)).json()["events"]
            assert [(e["action"], "newer agentd" in e["data"].get("error", "")) for e in audit] == [
                ("loaded", False),
                ("failed", True),
            ]
    # nothing of the newer file was changed
    conn = connect(tmp_path / "data" / "newer.sqlite")
    assert conn.execute("SELECT name FROM schema_migrations ORDER BY rowid DESC LIMIT 1").fetchone()[0] == (
        "9999_from_the_future"
    )
    conn.close()


def test_a_busy_port_is_refused_with_what_to_do() -> None:
    first = bind("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(OperatorError, match=rf"port {port} on 127.0.0.1 is already in use.*--port"):
            bind("127.0.0.1", port)
    finally:
        first.close()


def test_the_listening_socket_is_tcp_so_asyncio_turns_nagle_off() -> None:
    # a socket made with proto 0 gets no TCP_NODELAY from asyncio: every response then waited ~40 ms
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
