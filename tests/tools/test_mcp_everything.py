"""The MCP client against the reference server-everything (npm), which exercises every protocol feature:
its log messages reach agentd's log and `agentd tools`, progress keeps a long call alive up to `max_s`
and is heard by the streamed reply, the roots of the file are what it lists, and a tool that can only
run as a task is not offered, saying why."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import httpx
import pytest

from agentd.cli.tools import render_tools
from agentd.events import InboundEvent
from agentd.store.queries import Runs
from agentd.tools.mcp_remote import TASKS_REQUIRED
from testkit.fake_llm import FakeLLM
from testkit.sinks import Heard
from testkit.waiting import wait_until
from tests.support import Harness, say
from tests.tools.reference import everything, needs_node
from tests.tools.support import agent_yaml, openai, tool_agent, tool_events, tool_results

pytestmark = needs_node
LONG = "everything__trigger-long-running-operation"


async def test_its_log_messages_go_to_agentds_log_and_to_agentd_tools(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agentd.tools.mcp_logs")
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"everything": everything()}))
    fake.reply(tool_calls=[("everything__toggle-simulated-logging", {})])
    fake.reply("logging is on")
    await say(agent)("turn the server's logging on")
    server = agent.state.tool_servers.servers["everything"]
    # it sends one at once, then one every 5 s at a random level; we asked for info and above
    await wait_until(lambda: server.describe()["log"], "a log message from the server", timeout=15)
    [entry, *_] = server.describe()["log"]
    # server-everything writes "Info-level message" or "Alert level-message", by level
    assert entry["level"] != "debug" and re.search(r"level.message", entry["message"].lower())
    logged = [r for r in caplog.records if r.name == "agentd.tools.mcp_logs"]
    assert logged and "agent bot: MCP server everything: " in logged[0].getMessage()
    assert f"log: {entry['level']}: {entry['message']}" in render_tools(agent.tools_report())


async def test_progress_restarts_the_silence_allowed_up_to_max_s_and_is_heard(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {"everything": everything(timeout_s=1.0, max_s=2.5)}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    # 2 s in 4 steps: never silent for 1 s, done before 2.5 s
    fake.reply(tool_calls=[(LONG, {"duration": 2, "steps": 4})])
    fake.reply("done")
    heard = Heard()
    event = InboundEvent(agent.name, "webhook:c1", "run the long one", "webhook", user_id="u1")
    reply = await agent.handle(event, sink=heard)
    assert reply.text == "done"
    assert tool_results(fake.requests[1].json) == [
        "Long running operation completed. Duration: 2 seconds, Steps: 4."
    ]
    assert heard.progress_heard == [f"trigger-long-running-operation: {i}/4" for i in range(1, 5)]

    # silent for 1.5 s at a step: past timeout_s; progressing for 4 s: past max_s
    fake.reply(tool_calls=[(LONG, {"duration": 1.5, "steps": 1})])
    fake.reply("too slow")
    fake.reply(tool_calls=[(LONG, {"duration": 4, "steps": 8})])
    fake.reply("too long")
    await say(agent)("a silent one")
    await say(agent)("a long one")
    assert tool_results(fake.requests[3].json)[-1] == (
        "error: trigger-long-running-operation on everything did not answer within 1 s"
    )
    assert tool_results(fake.requests[5].json)[-1] == (
        "error: trigger-long-running-operation on everything did not finish within 2.5 s (max_s)"
    )
    actions = [action for action, _ in await tool_events(agent)]
    assert actions == ["called", "failed", "failed"]


async def test_the_files_roots_are_what_it_lists(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    (tmp_path / "docs").mkdir()
    servers = {"everything": everything(roots=[str(tmp_path / "docs"), "file:///srv/shared"])}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    fake.reply(tool_calls=[("everything__get-roots-list", {})])
    fake.reply("listed")
    await say(agent)("what roots do you have?")
    [listed] = tool_results(fake.requests[1].json)
    assert (tmp_path / "docs").resolve().as_uri() in listed and "file:///srv/shared" in listed


async def test_a_tool_that_only_runs_as_a_task_is_not_offered_and_agentd_tools_says_why(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"everything": everything()}))
    report = agent.tools_report()
    names = [t["origin"] for t in report["tools"]]
    assert "echo" in names and "simulate-research-query" not in names
    described = report["servers"]["everything"]
    assert described["not_offered"] == {"simulate-research-query": TASKS_REQUIRED}
    assert "simulate-research-query" in described["tools"]  # listed by the server, not offered
    assert f"not offered: simulate-research-query: {TASKS_REQUIRED}" in render_tools(report)


async def test_its_resources_are_listed_and_read_as_tools_and_a_link_in_a_result_is_followed(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {"everything": everything()}
    agent = await tool_agent(
        harness, openai(fake, client), agent_yaml(servers, ask=["everything.read_resource"])
    )
    fake.reply(
        tool_calls=[("everything__list_resources", {}), ("everything__get-resource-links", {"count": 2})]
    )
    fake.reply("listed")
    await say(agent)("what documents are there?")
    request = fake.requests[0].json
    reader = next(
        t["function"] for t in request["tools"] if t["function"]["name"] == "everything__read_resource"
    )
    assert reader["parameters"]["required"] == ["uri"]
    listing, links = tool_results(fake.requests[1].json)
    assert "demo://resource/static/document/" in listing
    assert "template demo://resource/dynamic/text/{resourceId}" in listing
    # the link says which tool reads it
    assert (
        "[resource demo://resource/dynamic/text/2 (Text Resource 2); read it with everything__read_resource]"
        in links
    )

    # reading is under the policy like any tool: here it is asked for, then approved and run
    fake.reply(tool_calls=[("everything__read_resource", {"uri": "demo://resource/dynamic/text/2"})])
    fake.reply("read it")
    asked = await say(agent)("read the second one")
    assert asked.approval is not None
    await agent.decide_approval(asked.approval, True)  # the operator; waits for the resumed run
    [*_, read] = tool_results(fake.requests[3].json)
    assert read.startswith("Resource 2: This is a plaintext resource created at")
    actions = [(action, data["tool"]) for action, data in await tool_events(agent)]
    assert actions[-3:] == [
        ("approval_requested", "everything__read_resource"),
        ("approved", "everything__read_resource"),
        ("called", "everything__read_resource"),
    ]


async def test_sampling_is_answered_by_the_named_model_as_a_run_of_its_own_only_when_on(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {
        "plain": everything(),
        "everything": everything(sampling=True, sampling_model="fake/gpt-small"),
    }
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    # off by default: that client declares no sampling, and server-everything then lists no sampling tool
    described = agent.state.tool_servers.describe()
    assert "trigger-sampling-request" not in described["plain"]["tools"]
    assert "trigger-sampling-request" in described["everything"]["tools"]
    fake.reply(tool_calls=[("everything__trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 50})])
    fake.reply("Autumn moon rises")  # the sampling call
    fake.reply("The server got its haiku.")
    reply = await say(agent, user="ana")("have the server write a haiku")
    assert reply.text == "The server got its haiku."
    sampled = fake.requests[1].json
    assert sampled["model"] == "gpt-small"
    assert sampled["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    assert "a haiku" in sampled["messages"][1]["content"]
    assert sampled.get("max_tokens", sampled.get("max_completion_tokens")) == 50
    assert "Autumn moon rises" in tool_results(fake.requests[2].json)[0]

    runs = await agent.state.store.read(Runs("webhook:c1"))
    turn = next(r for r in runs if r["trigger"] == "message")
    [sampling] = [r for r in runs if r["trigger"] == "sampling"]
    assert sampling["parent_run_id"] == turn["id"] and sampling["model"] == "fake/gpt-small"
    assert sampling["status"] == "ok" and sampling["output_tokens"] > 0
    events = await tool_events(agent)
    [(_, data)] = [(a, d) for a, d in events if a == "sampled"]
    assert data["server"] == "everything" and data["model"] == "fake/gpt-small" and data["user"] == "ana"
    assert "Autumn" not in str(data), "what the model wrote is not audited"


async def test_a_failed_sampling_call_is_the_servers_error_a_failed_run_and_audited(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient
) -> None:
    servers = {"everything": everything(sampling=True, sampling_model="fake/gpt-small")}
    agent = await tool_agent(harness, openai(fake, client), agent_yaml(servers))
    fake.reply(tool_calls=[("everything__trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 50})])
    fake.fail(503, message="overloaded")  # the sampling call: the model is down
    fake.reply("The server could not get its haiku.")
    await say(agent, user="ana")("have the server write a haiku")
    [result] = tool_results(fake.requests[2].json)
    assert "the model could not answer" in result
    [sampling] = [r for r in await agent.state.store.read(Runs("webhook:c1")) if r["trigger"] == "sampling"]
    assert sampling["status"] == "error" and "overloaded" in sampling["error"]
    [(_, data)] = [(a, d) for a, d in await tool_events(agent) if a == "sampling_failed"]
    assert data["server"] == "everything" and "overloaded" in data["error"]
