"""Many agents in one daemon: none of their files touched at start, a cap of files open, and running
out of descriptors (under a real limit) failing one request with a reason, never the daemon."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.daemon.host import AgentHost
from agentd.engine.agent import Agent
from agentd.events import InboundEvent
from agentd.http.app import create_app
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess
from tests.support import Harness

WEBHOOK = "memory: {scope: thread}\nchannels: {webhook: {}}\n"


def agents_folder(root: Path, count: int, settings: str | None = None) -> Path:
    (root / "agents").mkdir()
    for i in range(count):
        (root / "agents" / f"a{i}.yaml").write_text(WEBHOOK)
    if settings is not None:
        (root / "agentd.yaml").write_text(settings)
    return root / "agents"


def data_files(root: Path) -> list[str]:
    data = root / "data"
    return sorted(p.name for p in data.iterdir() if p.suffix == ".sqlite") if data.is_dir() else []


async def test_agents_start_without_touching_their_files(tmp_path: Path) -> None:
    folder = agents_folder(tmp_path, 30)
    async with Daemon(folder, tmp_path / "data", reload_interval=60) as daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            listed = (await client.get("/agents")).json()
            assert {(a["status"], a["data"]) for a in listed["agents"]} == {("running", "unopened")}
            assert listed["daemon"]["agents"] == 30 and listed["daemon"]["files"]["open"] <= 1
            assert data_files(tmp_path) == ["_daemon.sqlite"]
            # the audit trail of every agent reads no file that was never written
            assert (await client.get("/audit", params={"kind": "config"})).status_code == 200
            assert data_files(tmp_path) == ["_daemon.sqlite"]

            sent = await client.post("/agents/a7/messages", json={"conversation_id": "c", "text": "hi"})
            assert sent.status_code == 200, sent.text
            assert data_files(tmp_path) == ["_daemon.sqlite", "a7.sqlite"]
            listed = (await client.get("/agents")).json()
            assert [a["name"] for a in listed["agents"] if a["data"] == "ready"] == ["a7"]
            hot = listed["daemon"]["hot_threads"]
            assert hot["entries"] == 1 and hot["misses"] == 1 and hot["bytes"] > 0
            assert hot["budget_bytes"] == 512 * 2**20


async def test_more_agents_than_open_files_all_keep_their_conversations(tmp_path: Path) -> None:
    folder = agents_folder(tmp_path, 12, "store: {max_open_files: 3}\n")
    async with Daemon(folder, tmp_path / "data", reload_interval=60) as daemon:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            for round_ in range(2):
                for i in range(12):
                    body = {"conversation_id": "c", "text": f"m{round_}"}
                    reply = (await client.post(f"/agents/a{i}/messages", json=body)).json()["reply"]
                    assert f"I see {2 * round_} earlier messages" in reply
                    assert daemon.resources.stats()["files"]["open"] <= 3
            files = (await client.get("/agents")).json()["daemon"]["files"]
            assert files["open"] == 3 and files["max_open"] == 3 and files["closed_lru"] >= 12


async def test_a_channel_whose_agent_cannot_open_its_file_gets_an_error_reply(harness: Harness) -> None:
    agent = await harness.agent(WEBHOOK)

    class Owner:
        name = "bot"

        def __init__(self, agent: Agent) -> None:
            self.agent: Agent | None = agent

    host = AgentHost(Owner(agent), spawn=lambda coro: pytest.fail("nothing is spawned"))
    assert "You said: hi" in (await host.dispatch(InboundEvent("bot", "telegram:1", "hi", "telegram"))).text
    # the file, closed while idle, cannot be opened again (here: something else took its place)
    await agent.state.store.close()
    path = harness.data / "bot.sqlite"
    path.rename(path.with_suffix(".moved"))
    path.write_bytes(b"this is not a database" * 100)
    event = InboundEvent("bot", "telegram:1", "hello", "telegram", user_id="u1", event_id="e1")
    reply = await host.dispatch(event)
    assert reply.error == "store_unavailable" and "send it again" in reply.text
    assert agent.status == "running"  # the agent carries on: the next message tries again
    path.with_suffix(".moved").replace(path)
    again = await host.dispatch(event)  # the platform redelivers: not a duplicate, it was not answered
    assert again.error is None and not again.duplicate and "You said: hello" in again.text


# -- a real descriptor limit: `agentd run` in a child process -----------------------------------


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def soft_limit_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line in /proc/<pid>/limits")


needs_proc = pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads /proc")


@needs_proc
@pytest.mark.slow
async def test_agentd_run_raises_its_soft_open_files_limit(tmp_path: Path) -> None:
    agents_folder(tmp_path, 1)
    daemon = await DaemonProcess(tmp_path, open_files=(256, 2048)).start()
    try:
        assert daemon.proc is not None and soft_limit_of(daemon.proc.pid) == 2048
        assert "raised the open-files limit from 256 to 2048" in daemon.log.read_text()
    finally:
        daemon.kill()


@needs_proc
@pytest.mark.slow
async def test_under_a_low_limit_every_agent_serves_and_running_out_fails_one_request(
    tmp_path: Path,
) -> None:
    # 40 agents hold 120 descriptors when all open; the daemon may hold 100. The cap of open files
    # follows the limit, so every agent serves; idle files close within a fraction of a second.
    agents_folder(tmp_path, 40, "store: {close_idle_after_s: 0.2}\n")
    daemon = await DaemonProcess(tmp_path, reload_interval=60, open_files=(100, 100)).start()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    try:
        for round_ in range(2):
            for i in range(40):
                said = daemon.say(f"m{round_}", agent=f"a{i}")
                assert f"I see {2 * round_} earlier messages" in said["reply"]
        files = daemon.get("/agents")["daemon"]["files"]
        assert files["descriptor_limit"] == 100 and files["max_open"] == 22
        await wait_until(lambda: daemon.get("/agents")["daemon"]["files"]["open"] == 0, "idle files to close")

        # one connection, made (and kept alive) before the daemon runs out
        async with httpx.AsyncClient(base_url=daemon.url, timeout=10) as client:
            assert (await client.get("/healthz")).status_code == 200
            # more connections than the daemon may accept: it takes them until it has no descriptor left
            hogs = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(120)]
            try:
                await wait_until(lambda: open_descriptors(pid) >= 100, "the daemon to run out of descriptors")
                body = {"conversation_id": "c1", "text": "hi"}
                refused = await client.post("/agents/a1/messages", json=body)
                assert refused.status_code == 503
                assert "out of file descriptors" in refused.json()["error"], refused.text
            finally:
                for hog in hogs:
                    hog.close()
            await wait_until(lambda: open_descriptors(pid) < 60, "the daemon to let those connections go")
            again = await client.post("/agents/a1/messages", json=body)
            assert again.status_code == 200 and "I see 4 earlier messages" in again.json()["reply"]
            files = (await client.get("/agents")).json()["daemon"]["files"]
            assert files["descriptor_shortages"] >= 1
    finally:
        daemon.kill()
