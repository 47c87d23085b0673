"""The MCP client against the PyPI reference servers, mcp-server-time and mcp-server-git (run from a
virtualenv of their own: testkit/reference_mcp.py): their hints decide and show, their tools answer,
and a server that cannot start says why (its stderr and exit status) in `agentd tools`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from agentd.cli.tools import render_tools
from agentd.tools.policy import DESTRUCTIVE_RULE
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import Harness, say
from tests.tools.reference import git_server, time_server
from tests.tools.support import agent_yaml, openai, tool_agent, tool_events, tool_results


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "README").write_text("hello\n")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


async def test_mcp_server_time_answers_and_its_read_only_hint_shows(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"time": time_server()}))
    tools = {t["origin"]: t for t in agent.tools_report()["tools"] if t["server"] == "time"}
    assert tools["get_current_time"]["hints"]["readOnlyHint"] is True
    assert tools["get_current_time"]["decision"] == "allow"
    fake.reply(tool_calls=[("time__get_current_time", {"timezone": "Europe/Lisbon"})])
    fake.reply("It is late.")
    assert (await say(agent)("what time is it in Lisbon?")).text == "It is late."
    [result] = tool_results(fake.requests[1].json)
    assert '"timezone": "Europe/Lisbon"' in result


async def test_mcp_server_git_reset_is_asked_for_and_status_runs(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, repo: Path
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"git": git_server(repo)}))
    tools = {t["origin"]: t for t in agent.tools_report()["tools"] if t["server"] == "git"}
    assert (tools["git_reset"]["decision"], tools["git_reset"]["rule"]) == ("ask", DESTRUCTIVE_RULE)
    assert tools["git_status"]["decision"] == "allow" and tools["git_add"]["decision"] == "allow"
    fake.reply(tool_calls=[("git__git_status", {"repo_path": str(repo)})])
    fake.reply("One untracked file.")
    await say(agent)("git status?")
    assert "README" in tool_results(fake.requests[1].json)[0]
    fake.reply(tool_calls=[("git__git_reset", {"repo_path": str(repo)})])
    asked = await say(agent)("reset it")
    assert asked.approval is not None
    actions = [(a, d["tool"]) for a, d in await tool_events(agent)]
    assert actions == [("called", "git__git_status"), ("approval_requested", "git__git_reset")]


async def test_a_server_that_cannot_start_says_why_in_agentd_tools(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    servers = {"git": git_server(tmp_path / "missing")}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers), wait=False)
    server = agent.state.tool_servers.servers["git"]
    await wait_until(lambda: server.status == "restarting", "the server to fail", timeout=20)
    described = server.describe()
    assert described["exit_status"] == 1
    assert any("does not exist" in line for line in described["stderr"])
    shown = render_tools(agent.tools_report())
    assert "server git (stdio): restarting (" in shown and "it exited with status 1" in shown
    assert "  exit status: 1" in shown and "does not exist" in shown
