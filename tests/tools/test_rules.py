"""The rules under the tools: names the model can use, deny > ask > allow, redaction, the file's checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentd.config.loader import parse_agent
from agentd.config.tools import ToolsSpec
from agentd.errors import ConfigError
from agentd.tools.naming import VALID_NAME, model_tool_name
from agentd.tools.policy import Policy
from agentd.tools.redaction import audit_args


def test_tool_names_are_valid_for_openai_and_anthropic_and_stable() -> None:
    assert model_tool_name("files", "read_file") == "files__read_file"
    odd = model_tool_name("files", "read.file/v2")
    assert VALID_NAME.match(odd) and odd.startswith("files__read_file_v2_")
    assert odd == model_tool_name("files", "read.file/v2")  # the same name at every start
    assert odd != model_tool_name("files", "read-file/v2")  # two tools never share a name
    long = model_tool_name("a-long-server-name", "x" * 100)
    assert len(long) == 64 and VALID_NAME.match(long)
    assert long != model_tool_name("a-long-server-name", "x" * 99)


def test_deny_beats_ask_beats_allow() -> None:
    spec = ToolsSpec.model_validate(
        {
            "mcp": {"files": {"command": ["x"]}},
            "allow": ["files.*"],
            "ask": ["files.write_*", "memory.forget"],
            "deny": ["files.write_secret"],
        }
    )
    policy = Policy(spec)
    assert policy.decide("files", "write_secret").decision == "deny"
    assert policy.decide("files", "write_file").decision == "ask"
    assert policy.decide("files", "read_file").rule == "allow: files.*"
    assert policy.decide("memory", "forget").decision == "ask"
    assert policy.decide("memory", "remember").rule == "built-in"
    only = Policy(
        ToolsSpec.model_validate({"mcp": {"files": {"command": ["x"]}}, "allow": ["files.read_file"]})
    )
    assert (only.decide("files", "write_file").decision, only.decide("files", "write_file").rule) == (
        "deny",
        "not in allow",
    )
    everything = Policy(ToolsSpec.model_validate({"mcp": {"files": {"command": ["x"]}}}))
    assert everything.decide("files", "anything").decision == "allow"


def test_unmatched_patterns_are_problems_of_their_server() -> None:
    spec = ToolsSpec.model_validate(
        {
            "mcp": {"a": {"command": ["x"]}, "b": {"command": ["y"]}},
            "ask": ["a.writ", "b.*"],
            "deny": ["a.rm*"],
        }
    )
    assert Policy(spec).unmatched("a", ["write", "rmdir"]) == [
        "ask pattern 'a.writ' matches no tool of a (its tools: rmdir, write)"
    ]
    assert Policy(spec).unmatched("b", []) == ["ask pattern 'b.*' matches no tool of b (its tools: none)"]


def test_redaction() -> None:
    args = {
        "path": "a.txt",
        "Authorization": "Bearer x",
        "apiKey": "k",
        "body": "b" * 201,
        "items": [{"secret_value": 1}, "c" * 300, 5],
        "value": "private memory",
    }
    assert audit_args(args, "redacted", private={"value"}) == {
        "path": "a.txt",
        "Authorization": "[redacted]",
        "apiKey": "[redacted]",
        "body": "[redacted: 201 characters]",
        "items": [{"secret_value": "[redacted]"}, "[redacted: 300 characters]", 5],
    }
    assert audit_args(args, "full", private={"value"}) == {k: v for k, v in args.items() if k != "value"}
    assert audit_args(args, "none") is None


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_agent(Path("agents/bot.yaml"), text=text, env={})
    return [str(p) for p in raised.value.problems]


def test_the_file_is_checked_with_lines() -> None:
    text = """\
purpose: p
subagents: [{agent: helper}]
tools:
  mcp:
    files: {command: [python, server.py], timeout_s: 5}
    web: {url: "ftp://x"}
    both: {command: [x], url: "http://127.0.0.1:1/mcp"}
  allow: [files.read_file]
  deny: [filez.rm, agents.ask_nobody]
  ask: [write_file]
  approvers: [U777]
  audit_args: some
"""
    assert problems(text) == [
        "agents/bot.yaml:6:16: tools.mcp.web.url: expected an http:// or https:// URL of the server's MCP "
        "endpoint, got 'ftp://x'",
        "agents/bot.yaml:7:11: tools.mcp.both: give either `command: [program, args...]` (run over stdio) "
        "or `url:` (Streamable HTTP)",
        "agents/bot.yaml:10:9: tools.ask.0: expected <server>.<tool> (e.g. files.read_file, search.*, "
        "memory.forget), got 'write_file'",
        "agents/bot.yaml:11:15: tools.approvers.0: expected <channel>:<user id> (e.g. slack:U777, discord:123), "
        "got 'U777'",
        "agents/bot.yaml:12:15: tools.audit_args: expected 'none', 'redacted' or 'full'",
    ]


@pytest.mark.parametrize(
    ("name", "says"),
    [("memory", "'memory' names the built-in memory tools"), ("two__parts", "server name 'two__parts'")],
)
def test_server_names(name: str, says: str) -> None:
    [found] = problems(f"purpose: p\ntools:\n  mcp:\n    {name}: {{command: [x]}}\n")
    assert re.match(rf"agents/bot.yaml:4:5: tools.mcp: .*{re.escape(says)}", found), found


def test_patterns_must_name_a_source_and_defined_sub_agents() -> None:
    text = """\
purpose: p
subagents: [{agent: helper}]
tools:
  mcp:
    files: {command: [python, server.py]}
  deny: [filez.rm, agents.ask_nobody, agents.ask_helper]
  allow: [memory.forget]
"""
    assert problems(text) == [
        "agents/bot.yaml:6:10: tools.deny: 'filez.rm' names no tool source 'filez'; known: files, memory, agents, jobs",
        "agents/bot.yaml:6:20: tools.deny: 'agents.ask_nobody' matches no sub-agent tool; defined: ask_helper",
        "agents/bot.yaml:7:11: tools.allow: 'memory.forget': allow applies to MCP servers; built-in tools are "
        "always allowed (use deny or ask for them)",
    ]
