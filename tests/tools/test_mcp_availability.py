"""Which tools a turn has while MCP servers start, restart or cannot be reached: a message during a
server's first connection waits for its tools; an unknown tool's error lists only what was offered;
`agentd tools` says a server it cannot reach is a problem (exit 1)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx
import pytest

from agentd.cli import main
from testkit.fake_llm import FakeLLM
from testkit.fake_mcp import serve_http, stdio_command
from tests.daemon_process import free_port
from tests.support import Harness, say
from tests.tools.support import agent_yaml, offered, openai, tool_agent, tool_results

# a stdio server that says why it cannot start, on stderr, and exits
CRASHES = [
    sys.executable,
    "-c",
    "import sys; print('starting', file=sys.stderr); print('error: no API key in FILES_KEY', file=sys.stderr);"
    " sys.exit(3)",
]


async def test_a_crashed_servers_stderr_is_logged_and_shown_not_written_raw(
    harness: Harness,
    fake: FakeLLM,
    client: httpx.AsyncClient,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "agentd.tools")
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml({"files": {"command": CRASHES}}), wait=False
    )
    await agent.state.tool_servers.wait_started()
    described = agent.state.tool_servers.describe()["files"]
    assert described["stderr"] == ["starting", "error: no API key in FILES_KEY"]
    assert described["exit_status"] == 3
    assert described["error"] == (
        "Connection closed; it exited with status 3; its stderr said: starting | error: no API key in FILES_KEY"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "agentd.tools.mcp_stderr"]
    assert "agent bot: MCP server files: error: no API key in FILES_KEY" in logged
    assert "no API key" not in capfd.readouterr().err  # nothing raw in the process's own stderr stream


async def test_a_message_while_a_server_starts_waits_for_its_tools(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    python, flag, code = stdio_command()
    slow = {"command": [python, flag, f"import time; time.sleep(1.5); {code}"], "env": {"ROOT": str(root)}}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": slow}), wait=False)
    assert agent.state.tool_servers.describe()["files"]["status"] == "starting"
    fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
    fake.reply("You need milk.")
    reply = await say(agent)("what is on my list?")  # at once: the server is still starting
    assert "files__read_file" in offered(fake.requests[0].json)
    assert reply.text == "You need milk." and tool_results(fake.requests[1].json) == ["buy milk"]


async def test_a_server_that_is_down_is_not_waited_for(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    broken = {"command": [sys.executable, "-c", "import sys; sys.exit(3)"], "connect_timeout_s": 30}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": broken}), wait=False)
    await agent.state.tool_servers.wait_started()  # its first attempt failed: no longer starting
    assert agent.state.tool_servers.describe()["files"]["status"] == "restarting"
    fake.reply("No tools today.")
    assert (await say(agent)("hi")).text == "No tools today."
    assert offered(fake.requests[0].json) == []


async def test_an_unknown_tool_lists_only_the_offered_ones(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    yaml_text = (
        "purpose: You use tools.\nmodel: fake/gpt-test\n"
        "memory: {scope: thread, persistent: true}\ntools: {deny: [memory.forget]}\n"
    )
    agent = await harness.agent(yaml_text, providers={"fake": openai(fake, client)})
    fake.reply(tool_calls=[("nosuch", {})])
    fake.reply("ok")
    await say(agent)("use a tool")
    assert sorted(offered(fake.requests[0].json)) == ["list_memories", "recall", "remember"]
    [result] = tool_results(fake.requests[1].json)
    assert result == "error: there is no tool named 'nosuch'; available: list_memories, recall, remember"


def test_agentd_tools_exits_1_when_a_server_cannot_be_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {"command": CRASHES}
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "bot.yaml").write_text(
        "purpose: p\n" + f"tools: {json.dumps({'mcp': {'files': broken}})}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["tools", "bot", "--agents", "agents", "--data", "data"]) == 1
    out = capsys.readouterr().out
    assert "server files (stdio): restarting (Connection closed" in out
    assert (
        "it exited with status 3; its stderr said: starting | error: no API key in FILES_KEY" in out
    )  # why, from the server


@pytest.mark.parametrize("unknown_session", [404, 400])
async def test_after_an_http_server_restarts_a_new_session_is_opened(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path, unknown_session: int
) -> None:
    # the spec's 404 for a session the server does not know, or the 400 "no valid session" some send
    port = free_port()
    async with serve_http(root, port, legacy=True) as url:  # 2025-era: initialize opens a session
        server = {"url": url, "timeout_s": 10}
        agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": server}))
        fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
        fake.reply("ok")
        await say(agent)("read it")
        assert tool_results(fake.requests[1].json) == ["buy milk"]
    (root / "notes.txt").write_text("buy bread", encoding="utf-8")
    # a new instance on the same port: it knows no old session
    async with serve_http(root, port, legacy=True, unknown_session=unknown_session):
        fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
        fake.reply("ok")
        await say(agent)("read it again")
        assert tool_results(fake.requests[3].json)[-1] == "buy bread", agent.state.tool_servers.describe()
        described = agent.state.tool_servers.describe()["files"]
        assert described["status"] == "running" and described["restarts"] >= 1
