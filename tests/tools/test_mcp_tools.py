"""MCP tools through the whole engine: a real MCP server (the SDK's server API) over stdio and Streamable
HTTP, a fake OpenAI/Anthropic model on loopback calling them, the policy, the limits and the audit rows."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from testkit.fake_llm import FakeLLM
from testkit.fake_mcp import serve_http
from testkit.waiting import wait_until
from tests.support import Harness, say
from tests.tools.support import (
    agent_yaml,
    anthropic,
    offered,
    openai,
    stdio_server,
    tool_agent,
    tool_events,
    tool_results,
)


@pytest.fixture(params=["stdio", "http"])
async def server(request: pytest.FixtureRequest, root: Path) -> AsyncIterator[dict[str, object]]:
    """The fake MCP server's entry in `tools.mcp`: a subprocess over stdio, or Streamable HTTP on loopback."""
    if request.param == "stdio":
        yield stdio_server(root, timeout_s=5)
    else:
        async with serve_http(root) as url:
            yield {"url": url, "headers": {"Authorization": "Bearer test-token"}, "timeout_s": 5}


async def test_an_allowed_tool_runs_and_its_call_is_audited(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, server: dict[str, object]
) -> None:
    agent = await tool_agent(
        harness,
        openai(fake, client),
        agent_yaml({"files": server}, allow=["files.read_file", "files.whoami"]),
    )
    fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
    fake.reply("You need milk.")
    reply = await say(agent, user="ana")("what is on my list?")
    assert reply.text == "You need milk." and reply.error is None
    first, second = fake.requests[0].json, fake.requests[1].json
    assert sorted(offered(first)) == ["files__read_file", "files__whoami"]  # only what allow lets through
    read_file = next(t["function"] for t in first["tools"] if t["function"]["name"] == "files__read_file")
    assert read_file["description"] == "Read a text file."
    assert read_file["parameters"]["properties"]["path"]["type"] == "string"
    assert tool_results(second) == ["buy milk"]
    [(action, data)] = await tool_events(agent)
    assert action == "called"
    assert data["tool"] == "files__read_file" and data["server"] == "files" and data["user"] == "ana"
    assert data["args"] == {"path": "notes.txt"} and data["duration_ms"] > 0
    assert "buy milk" not in json.dumps(data), "a tool's result is never written to the audit"


async def test_the_speaker_and_conversation_reach_the_server_in_meta(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, server: dict[str, object]
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": server}))
    fake.reply(tool_calls=[("files__whoami", {})])
    fake.reply("done")
    await say(agent, "webhook:t-7", user="ana")("who am I to the server?")
    seen = json.loads(tool_results(fake.requests[1].json)[0])
    assert seen["agentd/user_id"] == "ana"
    assert seen["agentd/conversation_key"] == "webhook:t-7"
    assert seen["agentd/agent"] == "bot" and len(seen["agentd/run_id"]) == 32


async def test_a_denied_tool_is_not_offered_and_a_call_anyway_is_refused(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    yaml_text = agent_yaml({"files": stdio_server(root)}, deny=["files.delete_file"])
    agent = await tool_agent(harness, openai(fake, client), yaml_text)
    fake.reply(tool_calls=[("files__delete_file", {"path": "notes.txt"})])
    fake.reply("I could not.")
    await say(agent)("delete my notes")
    assert "files__delete_file" not in offered(fake.requests[0].json)
    assert "files__read_file" in offered(fake.requests[0].json)
    [result] = tool_results(fake.requests[1].json)
    assert "not allowed" in result and "deny: files.delete_file" in result
    assert (root / "notes.txt").exists()
    assert [(a, d["tool"], d["rule"]) for a, d in await tool_events(agent)] == [
        ("denied", "files__delete_file", "deny: files.delete_file")
    ]


async def test_outside_allow_is_denied_and_deny_beats_ask_beats_allow(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    yaml_text = agent_yaml(
        {"files": stdio_server(root)},
        allow=["files.*"],
        ask=["files.write_file", "files.delete_file"],
        deny=["files.delete_file", "files.crash"],
    )
    agent = await tool_agent(harness, openai(fake, client), yaml_text)
    report = {t["name"]: (t["decision"], t["rule"]) for t in agent.tools_report()["tools"]}
    assert report["files__delete_file"] == ("deny", "deny: files.delete_file")
    assert report["files__write_file"] == ("ask", "ask: files.write_file")
    assert report["files__read_file"] == ("allow", "allow: files.*")
    assert report["files__crash"] == ("deny", "deny: files.crash")
    # the inspector shows the tools the next turn offers: what the policy does not deny
    shown = {
        t["name"]: (t["source"], t["decision"]) for t in (await agent.next_prompt("webhook:c1"))["tools"]
    }
    assert shown["files__write_file"] == ("files", "ask") and shown["files__read_file"] == ("files", "allow")
    assert "files__delete_file" not in shown and "files__crash" not in shown


async def test_a_hung_call_times_out_and_the_turn_completes(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, server: dict[str, object]
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": {**server, "timeout_s": 1}}))
    fake.reply(tool_calls=[("files__hang", {})])
    fake.reply("It did not answer.")
    reply = await say(agent)("try the slow thing")
    assert reply.text == "It did not answer."
    [result] = tool_results(fake.requests[1].json)
    assert "hang on files did not answer within 1 s" in result
    [(action, data)] = await tool_events(agent)
    assert action == "failed" and 900 < data["duration_ms"] < 5000
    # the server is still there for the next call
    fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
    fake.reply("ok")
    await say(agent)("read it")
    assert tool_results(fake.requests[3].json)[-1] == "buy milk"


async def test_an_oversized_result_is_cut_with_a_note(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, server: dict[str, object]
) -> None:
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml({"files": {**server, "max_result_chars": 1000}})
    )
    fake.reply(tool_calls=[("files__big", {"chars": 5000})])
    fake.reply("That was long.")
    await say(agent)("give me a lot")
    [result] = tool_results(fake.requests[1].json)
    assert result.startswith("x" * 1000) and "x" * 1001 not in result
    assert "[cut: the result was 5000 characters; only the first 1000 are shown." in result


async def test_a_crashed_server_gives_a_tool_error_and_is_restarted(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}))
    fake.reply(tool_calls=[("files__crash", {})])
    fake.reply("The tool broke.")
    reply = await say(agent)("crash it")
    assert reply.text == "The tool broke." and reply.error is None
    [result] = tool_results(fake.requests[1].json)
    assert "files stopped during the call" in result
    servers = agent.state.tool_servers
    await wait_until(lambda: servers.describe()["files"]["restarts"] >= 1, "the server to be seen down")
    await wait_until(lambda: servers.describe()["files"]["status"] == "running", "the server to restart", 15)
    fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
    fake.reply("ok")
    await say(agent)("read it now")
    assert tool_results(fake.requests[3].json)[-1] == "buy milk"
    actions = [a for a, _ in await tool_events(agent)]
    assert actions == ["failed", "called"]


async def test_a_changed_tool_list_is_picked_up(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, server: dict[str, object]
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": server}))
    assert "files__fresh" not in [t.name for t in agent.state.tool_servers.tools()]
    fake.reply(tool_calls=[("files__grow", {})])
    fake.reply("grown")
    await say(agent)("grow")
    await wait_until(
        lambda: "files__fresh" in [t.name for t in agent.state.tool_servers.tools()],
        "the new tool to be listed",
    )
    fake.reply("hello")
    await say(agent)("what now?")
    assert "files__fresh" in offered(fake.requests[2].json)


async def test_arguments_are_redacted_in_the_audit_by_default(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}))
    args = {"text": "y" * 300, "api_token": "sk-live-123", "nested": {"password": "hunter2", "ok": 1}}
    fake.reply(tool_calls=[("files__echo", args)])
    fake.reply("done")
    await say(agent)("echo")
    [(_, data)] = await tool_events(agent)
    assert data["args"] == {
        "text": "[redacted: 300 characters]",
        "api_token": "[redacted]",
        "nested": {"password": "[redacted]", "ok": 1},
    }


@pytest.mark.parametrize("mode", ["full", "none"])
async def test_audit_args_full_or_none(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path, mode: str
) -> None:
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml({"files": stdio_server(root)}, audit_args=mode)
    )
    fake.reply(tool_calls=[("files__echo", {"text": "z" * 300})])
    fake.reply("done")
    await say(agent)("echo")
    [(_, data)] = await tool_events(agent)
    if mode == "full":
        assert data["args"] == {"text": "z" * 300}
    else:
        assert "args" not in data


async def test_a_pattern_that_matches_no_tool_withholds_the_servers_tools(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    yaml_text = agent_yaml({"files": stdio_server(root)}, deny=["files.delete_fil"])
    agent = await tool_agent(harness, openai(fake, client), yaml_text)
    problems = agent.state.tool_servers.describe()["files"]["problems"]
    assert problems == [
        "deny pattern 'files.delete_fil' matches no tool of files (its tools: big, crash, delete_file, echo, "
        "grow, hang, list_files, log, read_file, whoami, write_file)"
    ]
    fake.reply("no tools")
    await say(agent)("hi")
    assert offered(fake.requests[0].json) == []  # a misspelled deny must not let delete_file through


async def test_tool_calls_over_the_anthropic_wire(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(harness, anthropic(fake, client), agent_yaml({"files": stdio_server(root)}))
    fake.reply(tool_calls=[("files__read_file", {"path": "notes.txt"})])
    fake.reply("Milk.")
    reply = await say(agent)("list?")
    assert reply.text == "Milk."
    body = fake.requests[1].json
    assert "files__read_file" in [t["name"] for t in fake.requests[0].json["tools"]]
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == "buy milk"


async def test_a_servers_log_message_reaches_agentds_log_at_its_level_and_agentd_tools(
    harness: Harness,
    fake: FakeLLM,
    client: httpx.AsyncClient,
    server: dict[str, object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "agentd.tools.mcp_logs")
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"files": server}))
    fake.reply(tool_calls=[("files__log", {"level": "debug", "data": {"quiet": True}})])
    fake.reply(tool_calls=[("files__log", {"level": "error", "data": {"disk": "full"}})])
    fake.reply("logged")
    await say(agent)("log something")
    assert tool_results(fake.requests[2].json) == ["logged", "logged"]
    # asked for at info and above: the debug one is not sent
    [entry] = agent.state.tool_servers.servers["files"].describe()["log"]
    assert (entry["level"], entry["logger"], entry["message"]) == ("error", "fake", '{"disk": "full"}')
    [record] = [r for r in caplog.records if r.name == "agentd.tools.mcp_logs"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == 'agent bot: MCP server files (fake): {"disk": "full"}'
