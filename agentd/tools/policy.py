"""Who may call what: allow / deny / ask, decided before every call and before a tool is offered.

Deny beats ask beats allow. A tool that is not allowed is not offered to the
model, and a call to it anyway gets a tool error. MCP tools are allowed when
`allow` is absent or one of its patterns matches; built-in tools (memory,
sub-agents) are the file's own choice and allowed unless denied or asked.

A tool its server marks destructive (`destructiveHint: true`, not
`readOnlyHint`) is asked for unless an `allow` pattern names it exactly: a
wildcard such as `files.*` was written before anyone knew what the server
would list, so it does not say the file meant to let a destructive call run
unasked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentd.config.models import AgentSpec
from agentd.config.tools import BUILTIN_SOURCES, MEMORY_SOURCE, PATTERN_RE, ToolsSpec, pattern_matches
from agentd.tools.base import Tool

# What `memory.writes: ask` puts under `ask`: every tool that writes to memory.
MEMORY_WRITES = tuple(f"{MEMORY_SOURCE}.{tool}" for tool in ("remember", "forget", "save_episode"))

Decision = Literal["allow", "ask", "deny"]
DESTRUCTIVE_RULE = "destructiveHint: its server marks it destructive (name it in allow to run it unasked)"


@dataclass(frozen=True, slots=True)
class Ruling:
    decision: Decision
    rule: str  # what decided it, as the audit trail and `agentd tools` show it

    @property
    def offered(self) -> bool:
        return self.decision != "deny"


class Policy:
    def __init__(self, spec: ToolsSpec):
        self.spec = spec

    @classmethod
    def of(cls, agent: AgentSpec) -> Policy:
        """An agent's policy: its `tools:` block, with `memory.writes: ask` as ask patterns."""
        tools = agent.tools
        if agent.memory.writes == "ask":
            tools = tools.model_copy(update={"ask": [*tools.ask, *MEMORY_WRITES]})
        return cls(tools)

    def ruling(self, tool: Tool) -> Ruling:
        """What the policy decides for `tool`, its server's destructive hint included."""
        return self.decide(tool.source, tool.origin_name, destructive=tool.destructive)

    def decide(self, source: str, tool: str, *, destructive: bool = False) -> Ruling:
        for which in ("deny", "ask"):
            for pattern in getattr(self.spec, which):
                if pattern_matches(pattern, source, tool):
                    return Ruling("deny" if which == "deny" else "ask", f"{which}: {pattern}")
        if source in BUILTIN_SOURCES:
            return Ruling("allow", "built-in")
        ruling = self._allowed(source, tool)
        if destructive and ruling.decision == "allow" and ruling.rule != f"allow: {source}.{tool}":
            return Ruling("ask", DESTRUCTIVE_RULE)
        return ruling

    def _allowed(self, source: str, tool: str) -> Ruling:
        if self.spec.allow is None:
            return Ruling("allow", "every tool of the listed servers")
        exact = f"{source}.{tool}"
        if exact in self.spec.allow:
            return Ruling("allow", f"allow: {exact}")
        for pattern in self.spec.allow:
            if pattern_matches(pattern, source, tool):
                return Ruling("allow", f"allow: {pattern}")
        return Ruling("deny", "not in allow")

    def unmatched(self, source: str, tools: list[str]) -> list[str]:
        """The patterns naming `source` that match none of its tools, each said as a problem."""
        problems = []
        for which, _, pattern in self.spec.patterns():
            match = PATTERN_RE.match(pattern)
            if match is None or match.group(1) != source:
                continue
            if not any(pattern_matches(pattern, source, tool) for tool in tools):
                listed = ", ".join(sorted(tools)) or "none"
                problems.append(
                    f"{which} pattern {pattern!r} matches no tool of {source} (its tools: {listed})"
                )
        return problems
