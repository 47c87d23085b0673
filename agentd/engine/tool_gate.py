"""The one step before every tool call: the policy decides, the call runs, the audit trail says so.

Every call — memory tools, sub-agents, MCP — becomes an audit event `{kind:
tool, action, tool, server, conversation_key, run_id, user, duration_ms,
args}`: `called` or `failed` when it ran, `denied` when the policy forbids it,
`approval_requested` when a person must approve it first (the run then pauses:
agentd.engine.approvals), then `approved`, `refused` or `expired`. The
arguments are kept as `audit_args` says (agentd.tools.redaction); a tool's
result never is. A refused, denied or failing call becomes an error result the
model reads, and the turn goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.progress import ToolBatch
from agentd.engine.tool_files import ToolFiles
from agentd.errors import ToolError
from agentd.messages import MediaPart, ToolCallPart, ToolResultPart
from agentd.store.records import AuditRecord
from agentd.tools.base import Tool, ToolCall, ToolOutput
from agentd.tools.policy import Policy
from agentd.tools.redaction import audit_args

log = logging.getLogger(__name__)

REFUSALS = {
    "refused": "{by} refused this call; it was not run. Do not retry it: answer without it.",
    "expired": "Nobody approved this call in time; it was not run. Answer without it.",
}


@dataclass(frozen=True, slots=True)
class ApprovalNeeded:
    """The call a person must approve before it runs."""

    call: ToolCallPart
    tool: Tool
    rule: str


def tool_audit(
    action: str,
    call: ToolCallPart,
    tool: Tool | None,
    caller: ToolCall,
    args: dict[str, Any] | None,
    **more: Any,
) -> AuditRecord:
    data: dict[str, Any] = {
        "tool": call.name,
        "server": tool.server if tool is not None else None,
        "user": caller.user_id,
    }
    if args is not None:
        data["args"] = args
    data.update({k: v for k, v in more.items() if v is not None})
    return AuditRecord("tool", action, caller.conversation_key, caller.run_id, data)


class ToolGate:
    def __init__(
        self,
        spec: AgentSpec,
        tools: Mapping[str, Tool],
        caller: ToolCall,
        audit: list[AuditRecord],
        *,
        can_ask: bool = True,
        files: ToolFiles | None = None,
    ):
        self._policy = Policy.of(spec)
        self._mode = spec.tools.audit_args
        self._tools = tools
        self._caller = caller
        self._audit = audit
        self._can_ask = can_ask
        self._files = files  # takes in the files a result carries (None: they are only named)

    def shown_args(self, call: ToolCallPart, tool: Tool | None) -> dict[str, Any] | None:
        if tool is None:
            return audit_args(call.arguments, self._mode)
        return audit_args(call.arguments, self._mode, tool.private_args, tool.plain_args)

    async def answer(self, batch: ToolBatch) -> ApprovalNeeded | None:
        """Answer the batch's calls in order; stop at the first one a person must approve."""
        while (call := batch.next_call) is not None:
            tool = self._tools.get(call.name)
            if tool is None:
                available = ", ".join(self._offered()) or "none"
                self._record("failed", call, None, error="no such tool")
                _answer(batch, call, f"there is no tool named {call.name!r}; available: {available}", True)
                continue
            ruling = self._policy.ruling(tool)
            if ruling.decision == "allow":
                await self._run(batch, call, tool, rule=ruling.rule)
            elif ruling.decision == "deny":
                self._record("denied", call, tool, rule=ruling.rule)
                _answer(batch, call, f"{call.name} is not allowed for this agent ({ruling.rule}).", True)
            elif self._can_ask:
                return ApprovalNeeded(call, tool, ruling.rule)
            else:
                self._record(
                    "refused", call, tool, rule=ruling.rule, reason="no person to ask in a sub-agent call"
                )
                _answer(
                    batch,
                    call,
                    f"{call.name} needs a person's approval, which a sub-agent call cannot ask.",
                    True,
                )
        return None

    async def settle(self, batch: ToolBatch, decision: str, by: str | None, approval: str) -> None:
        """Answer the call that waited for `approval`: run it when approved, else refuse it."""
        call = batch.next_call
        assert call is not None, "a paused run waits on a call"
        tool = self._tools.get(call.name)
        if decision == "approved" and tool is not None:
            await self._run(batch, call, tool, approved_by=by, approval=approval)
        elif decision == "approved":
            self._record("failed", call, None, approval=approval, error="tool gone")
            _answer(
                batch, call, f"{call.name} was approved but is no longer available; answer without it.", True
            )
        else:
            _answer(batch, call, REFUSALS[decision].format(by=by or "the approver"), True)

    async def _run(self, batch: ToolBatch, call: ToolCallPart, tool: Tool, **more: Any) -> None:
        started = time.perf_counter()
        action, is_error = "called", False
        output: str | ToolOutput
        try:
            output = await tool.handler(call.arguments, self._caller)
        except ToolError as e:
            output, action, is_error = str(e), "failed", True
        except Exception:
            log.exception("tool %s failed", call.name)
            output, action, is_error = f"the tool {call.name} failed with an internal error", "failed", True
        duration = round((time.perf_counter() - started) * 1000, 3)
        self._record(action, call, tool, duration_ms=duration, **more)
        content, media = (output, ()) if isinstance(output, str) else await self._taken(call, output)
        _answer(batch, call, content, is_error, media)

    async def _taken(self, call: ToolCallPart, output: ToolOutput) -> tuple[str, tuple[MediaPart, ...]]:
        """The result's text (with a line per file refused) and its files as stored references."""
        if not output.files:
            return output.text, ()
        if self._files is None:  # nowhere to keep them: the model is told what it is not shown
            said = [f"[{f.mime_type} file, {len(f.data)} bytes: not shown]" for f in output.files]
            return "\n".join([output.text, *said]).strip(), ()
        media, refused = await self._files.take(call.name, output.files)
        return "\n".join([output.text, *refused]).strip(), media

    def _offered(self) -> list[str]:
        """The tools the model was offered (not those the policy hides from it), for an unknown name."""
        return sorted(name for name, t in self._tools.items() if self._policy.ruling(t).offered)

    def _record(self, action: str, call: ToolCallPart, tool: Tool | None, **more: Any) -> None:
        self._audit.append(tool_audit(action, call, tool, self._caller, self.shown_args(call, tool), **more))


def _answer(
    batch: ToolBatch, call: ToolCallPart, content: str, is_error: bool, media: tuple[MediaPart, ...] = ()
) -> None:
    batch.results.append(
        ToolResultPart(call_id=call.id, name=call.name, content=content, is_error=is_error, media=media)
    )
