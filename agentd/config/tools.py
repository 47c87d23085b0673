"""`tools:` in an agent file: MCP servers, who may call what (allow / deny / ask), approvers, audit.

```yaml
tools:
  mcp:
    files:  {command: [python, -m, docs_server], env: {ROOT: /srv/docs}, timeout_s: 30}
    search: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}}
  allow: [files.read_file, "search.*"]   # default: every tool of the listed servers
  deny:  [files.delete_file]
  ask:   [files.write_file]
  approvers: [slack:U777, discord:123]
  audit_args: redacted
```

A pattern is `<source>.<tool>`, where the source is an MCP server of the file,
`memory` (the memory tools) or `agents` (the sub-agent tools), and `*` in the
tool part matches any characters. What can be checked from the file alone is
checked here (`reference_problems`): a pattern naming no server, or a sub-agent
tool the file does not define. Whether a pattern matches one of a server's
tools is known only once it runs (agentd.tools.policy).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.json_schema import JsonDict

from agentd.config.base import Spec
from agentd.config.refs import ModelRef

# Where a tool comes from, when it is not an MCP server: the patterns and the audit name them so.
MEMORY_SOURCE = "memory"
AGENTS_SOURCE = "agents"
JOBS_SOURCE = "jobs"  # schedule_job, list_jobs, ... (agentd/engine/job_tools.py)
BUILTIN_SOURCES = (MEMORY_SOURCE, AGENTS_SOURCE, JOBS_SOURCE)
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}$")
PATTERN_RE = re.compile(r"^([A-Za-z0-9_-]+)\.(\S+)$")
APPROVER_RE = re.compile(r"^[a-z][a-z0-9_]*:\S{1,128}$")
Loc = tuple[str | int, ...]


def subagent_tool_name(agent: str) -> str:
    """The tool a sub-agent slot gives the model: `ask_<agent>` ('-' becomes '_')."""
    return f"ask_{agent.replace('-', '_')}"[:64]


def pattern_matches(pattern: str, source: str, tool: str) -> bool:
    """Whether `source.tool` is matched by `pattern` (`*` in its tool part: any characters)."""
    match = PATTERN_RE.match(pattern)
    if match is None or match.group(1) != source:
        return False
    return fnmatch.fnmatchcase(tool, match.group(2).replace("[", "[[]"))


# The editor's schema says what `_one_transport` checks: a `command` (no url, no headers) or a `url` (no
# command, no env, no cwd); an empty env/headers or a null cwd is as good as none, as in the validator.
_TRANSPORT_SCHEMA: JsonDict = {
    "anyOf": [
        {
            "title": "stdio",
            "required": ["command"],
            "properties": {
                "command": {"type": "array"},
                "url": {"type": "null"},
                "headers": {"maxProperties": 0},
            },
        },
        {
            "title": "Streamable HTTP",
            "required": ["url"],
            "properties": {
                "url": {"type": "string"},
                "command": {"type": "null"},
                "env": {"maxProperties": 0},
                "cwd": {"maxLength": 0},
            },
        },
    ]
}
_URL_RE = r"^https?://[^\s/]+"
ROOT_RE = r"^(/|file:///)"


def _root(value: str) -> str:
    if not (value.startswith("/") or value.startswith("file:///")):
        raise ValueError(f"expected an absolute path or a file:/// URI of a folder, got {value!r}")
    return value


Root = Annotated[str, AfterValidator(_root), WithJsonSchema({"type": "string", "pattern": ROOT_RE})]


class McpServerSpec(Spec):
    """One MCP server: a command run over stdio, or a Streamable HTTP `url`."""

    model_config = ConfigDict(json_schema_extra=_TRANSPORT_SCHEMA)

    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = Field(default=None, json_schema_extra={"pattern": _URL_RE})
    headers: dict[str, str] = {}
    timeout_s: float = Field(default=30.0, gt=0, le=3600)  # one call's silence: progress restarts it
    max_s: float | None = Field(default=None, gt=0, le=24 * 3600)  # one call in all (None: 10 x timeout_s)
    connect_timeout_s: float = Field(default=30.0, gt=0, le=3600)  # starting and connecting
    max_concurrent_calls: int = Field(default=4, ge=1, le=256)
    max_result_chars: int = Field(default=20_000, ge=100, le=10_000_000)
    roots: list[Root] = []  # folders the server may work in (MCP roots): absolute paths or file:// URIs
    elicitation: bool = True  # the server may ask the person for input mid-call (/answer, /decline)
    sampling: bool = False  # answer its sampling/createMessage with the agent's model (a run, audited)
    sampling_model: ModelRef | None = None  # the model that answers (None: model.small, else model.name)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(_URL_RE, v):
            raise ValueError(f"expected an http:// or https:// URL of the server's MCP endpoint, got {v!r}")
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either `command: [program, args...]` (run over stdio) or `url:` (Streamable HTTP)"
            )
        if self.url is not None and (self.env or self.cwd):
            raise ValueError("env and cwd apply to a `command`; a `url` server runs elsewhere")
        if self.command is not None and self.headers:
            raise ValueError("headers apply to a `url` server; a `command` gets env instead")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    @property
    def whole_call_s(self) -> float:
        """How long one call may take in all, however often its server says it is progressing."""
        return max(self.max_s, self.timeout_s) if self.max_s is not None else 10 * self.timeout_s


def _pattern(value: str) -> str:
    if not PATTERN_RE.match(value):
        raise ValueError(
            f"expected <server>.<tool> (e.g. files.read_file, search.*, memory.forget), got {value!r}"
        )
    return value


def _approver(value: str) -> str:
    if not APPROVER_RE.match(value):
        raise ValueError(f"expected <channel>:<user id> (e.g. slack:U777, discord:123), got {value!r}")
    return value


Pattern = Annotated[
    str, AfterValidator(_pattern), WithJsonSchema({"type": "string", "pattern": PATTERN_RE.pattern})
]
Approver = Annotated[
    str, AfterValidator(_approver), WithJsonSchema({"type": "string", "pattern": APPROVER_RE.pattern})
]
# `_server_names` for an editor: the name's form, and not a built-in source's name
_SERVER_NAMES_SCHEMA: JsonDict = {
    "propertyNames": {
        "pattern": SERVER_NAME_RE.pattern,
        "not": {"enum": [*BUILTIN_SOURCES]},
    }
}


class ToolsSpec(Spec):
    mcp: dict[str, McpServerSpec] = Field(default={}, json_schema_extra=_SERVER_NAMES_SCHEMA)
    # None: every tool of the listed servers. Built-in tools (memory, sub-agents) are the file's own
    # choice and always allowed; deny and ask apply to them too.
    allow: list[Pattern] | None = None
    deny: list[Pattern] = []
    ask: list[Pattern] = []
    approvers: list[Approver] = []  # <channel>:<user id>; empty: the person who asked
    audit_args: Literal["none", "redacted", "full"] = "redacted"
    approval_timeout_s: float = Field(default=600.0, ge=1, le=7 * 24 * 3600)

    @field_validator("mcp")
    @classmethod
    def _server_names(cls, v: dict[str, McpServerSpec]) -> dict[str, McpServerSpec]:
        for name in v:
            if name in BUILTIN_SOURCES:
                raise ValueError(f"{name!r} names the built-in {name} tools: call the server something else")
            if not SERVER_NAME_RE.match(name):
                raise ValueError(
                    f"server name {name!r}: 1-32 letters, digits, '-' or single '_' (tools reach the model "
                    "as <server>__<tool>)"
                )
        return v

    def patterns(self) -> list[tuple[str, int, str]]:
        """Every pattern with where it is written: (list name, index, pattern)."""
        return [
            (which, i, pattern)
            for which in ("allow", "deny", "ask")
            for i, pattern in enumerate(getattr(self, which) or ())
        ]

    def reference_problems(self, subagent_tools: list[str]) -> list[tuple[Loc, str]]:
        """What the file alone shows to be wrong: a pattern naming no source, a sub-agent tool not defined."""
        problems: list[tuple[Loc, str]] = []
        for which, i, pattern in self.patterns():
            match = PATTERN_RE.match(pattern)
            assert match is not None  # checked by the field validator
            source, tool = match.groups()
            loc: Loc = ("tools", which, i)
            if source == AGENTS_SOURCE:
                if not any(fnmatch.fnmatchcase(t, tool) for t in subagent_tools):
                    defined = ", ".join(subagent_tools) or "none (no subagents:)"
                    problems.append((loc, f"{pattern!r} matches no sub-agent tool; defined: {defined}"))
            elif source not in (MEMORY_SOURCE, JOBS_SOURCE) and source not in self.mcp:
                known = ", ".join([*self.mcp, *BUILTIN_SOURCES])
                problems.append((loc, f"{pattern!r} names no tool source {source!r}; known: {known}"))
            elif which == "allow" and source in BUILTIN_SOURCES:
                problems.append(
                    (
                        loc,
                        f"{pattern!r}: allow applies to MCP servers; built-in tools are always allowed "
                        "(use deny or ask for them)",
                    )
                )
        return problems
