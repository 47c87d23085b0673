"""The MCP client against the reference server-filesystem (npm). Tool annotations: a tool its server
marks destructive is asked for unless the file allows it by name, and `agentd tools` shows each tool's
hints (server-filesystem marks write_file, edit_file and move_file `destructiveHint: true`, its readers
`readOnlyHint: true`). Roots: started with no folder, it works in the `roots:` the file gives."""

from __future__ import annotations

from pathlib import Path

import httpx

from agentd.cli.tools import render_tools
from agentd.config.tools import ToolsSpec
from agentd.tools.policy import DESTRUCTIVE_RULE, Policy
from testkit.fake_llm import FakeLLM
from tests.support import Harness, say
from tests.tools.reference import filesystem, needs_node
from tests.tools.support import agent_yaml, openai, tool_agent, tool_events, tool_results


def test_destructive_is_asked_unless_allowed_by_name_and_deny_still_wins() -> None:
    def decide(destructive: bool, **policy: object) -> tuple[str, str]:
        ruling = Policy(ToolsSpec.model_validate({"mcp": {}, **policy})).decide(
            "fs", "write_file", destructive=destructive
        )
        return ruling.decision, ruling.rule

    assert decide(True) == ("ask", DESTRUCTIVE_RULE)
    assert decide(False) == ("allow", "every tool of the listed servers")
    assert decide(True, allow=["fs.*"]) == ("ask", DESTRUCTIVE_RULE)  # a wildcard is not a decision
    assert decide(True, allow=["fs.*", "fs.write_file"]) == ("allow", "allow: fs.write_file")
    assert decide(True, allow=["fs.read_*"]) == ("deny", "not in allow")
    assert decide(True, allow=["fs.write_file"], deny=["fs.write_*"]) == ("deny", "deny: fs.write_*")


@needs_node
async def test_server_filesystems_hints_decide_and_show(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    yaml_text = agent_yaml({"fs": filesystem(root)}, allow=["fs.*", "fs.move_file"])
    agent = await tool_agent(harness, openai(fake, client), yaml_text)
    report = agent.tools_report()
    tools = {t["origin"]: t for t in report["tools"] if t["server"] == "fs"}
    assert tools["write_file"]["hints"]["destructiveHint"] is True
    assert (tools["write_file"]["decision"], tools["write_file"]["rule"]) == ("ask", DESTRUCTIVE_RULE)
    assert (tools["move_file"]["decision"], tools["move_file"]["rule"]) == ("allow", "allow: fs.move_file")
    assert tools["read_text_file"]["hints"]["readOnlyHint"] is True
    assert (tools["read_text_file"]["decision"], tools["read_text_file"]["rule"]) == ("allow", "allow: fs.*")
    shown = render_tools(report).splitlines()
    [write_row] = [line for line in shown if line.startswith("fs__write_file ")]
    assert "ask" in write_row and "destructive,idempotent" in write_row

    # the model's call waits for a person; nothing is written meanwhile
    target = root / "new.txt"
    fake.reply(tool_calls=[("fs__write_file", {"path": str(target), "content": "hello"})])
    reply = await say(agent, user="ana")("write hello to new.txt")
    assert reply.approval is not None and not target.exists()
    [(action, data)] = await tool_events(agent)
    assert action == "approval_requested" and data["rule"] == DESTRUCTIVE_RULE


@needs_node
async def test_server_filesystem_started_without_folders_works_in_the_files_roots(
    harness: Harness, fake: FakeLLM, client: httpx.AsyncClient, root: Path
) -> None:
    agent = await tool_agent(harness, openai(fake, client), agent_yaml({"fs": filesystem(roots=[str(root)])}))
    fake.reply(tool_calls=[("fs__list_allowed_directories", {})])
    fake.reply(tool_calls=[("fs__read_text_file", {"path": str(root / "notes.txt")})])
    fake.reply("You need milk.")
    reply = await say(agent)("what is on my list?")
    assert reply.text == "You need milk."
    allowed, read = tool_results(fake.requests[2].json)
    assert str(root) in allowed and read == "buy milk"  # tmp_path is resolved already
