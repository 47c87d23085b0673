"""Sub-agents: other agents of the daemon offered to the model as tools.

`subagents: [{agent: NAME, description?, memory_override?}]` gives the model
one tool per slot, `ask_<name>` ('-' becomes '_') taking `task`. A call runs
that agent on the task as an ordinary run in its own file, linked to the
caller's run (parent_run_id), with:

- its memory scoped to (sub-agent, the caller's conversation): the
  conversation key is `agent:<caller>:<caller's key>` (channel `agent`), so
  every conversation of the caller has its own thread with each sub-agent;
- the speaker kept: user_id is the caller's, so per-person memory (episodes,
  facts, persistent_scope: user) stays that person's;
- the slot's memory_override, when set, replacing the sub-agent's strategy.

Delegation is guarded: an agent never calls itself or an agent already above
it in the chain, and a chain is at most MAX_DEPTH calls deep. The chain is
carried in a context variable, which follows the call down because a tool
call awaits the sub-agent's run in the same task.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from agentd.config.models import AgentSpec, SubagentSpec
from agentd.errors import ToolError
from agentd.events import InboundEvent, is_conversation_key
from agentd.memory.registry import strategy_for
from agentd.memory.tooling import Tool, ToolCall, object_schema
from agentd.providers.base import ToolSpec

if TYPE_CHECKING:
    from agentd.engine.runtime import AgentRuntime

MAX_DEPTH = 3
CHANNEL = "agent"
TASK_MAX_CHARS = 20_000
# the agents whose runs are waiting on a sub-agent call further down this task, outermost first
_CALLERS: ContextVar[tuple[str, ...]] = ContextVar("agentd_subagent_callers", default=())


def tool_name(agent: str) -> str:
    return f"ask_{agent.replace('-', '_')}"[:64]


def subagent_key(caller: str, caller_key: str) -> str:
    """The sub-agent's conversation key for one conversation of the caller."""
    key = f"{CHANNEL}:{caller}:{caller_key}"
    if is_conversation_key(key):
        return key
    # too long for a key once nested: a stable digest of the caller's key instead
    return f"{CHANNEL}:{caller}:sha256-{hashlib.sha256(caller_key.encode()).hexdigest()[:40]}"


def _description(runtime: AgentRuntime, slot: SubagentSpec) -> str:
    if slot.description:
        return slot.description
    text = f"Ask the agent '{slot.agent}' to carry out a task; returns its answer."
    peer = runtime.peers(slot.agent)
    purpose = peer.spec.purpose.strip().splitlines()[0] if peer is not None and peer.spec.purpose else ""
    if purpose:
        text += f" Its purpose: {purpose[:300]}"
    return text


def subagent_tools(runtime: AgentRuntime, spec: AgentSpec) -> list[Tool]:
    return [_tool(runtime, slot) for slot in spec.subagents]


def _tool(runtime: AgentRuntime, slot: SubagentSpec) -> Tool:
    name = slot.agent

    async def ask(args: dict[str, Any], call: ToolCall) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolError("task must be non-empty text: what you want the agent to do")
        if len(task) > TASK_MAX_CHARS:
            raise ToolError(f"task is {len(task)} characters; the limit is {TASK_MAX_CHARS}. Shorten it.")
        if task.lstrip().startswith("/"):
            raise ToolError("a task cannot start with '/': sub-agents are not given commands")
        chain = (*_CALLERS.get(), runtime.name)
        if name in chain:
            raise ToolError(
                f"refused: {name} is already answering in this chain ({' -> '.join(chain)}); "
                "an agent cannot call itself or an agent that called it"
            )
        if len(chain) > MAX_DEPTH:
            raise ToolError(
                f"refused: sub-agent calls go at most {MAX_DEPTH} deep ({' -> '.join(chain)} -> {name})"
            )
        peer = runtime.peers(name)
        if peer is None or peer.status != "running":
            state = "is not running" if peer is not None else "does not exist in this daemon"
            raise ToolError(f"the agent {name!r} {state}; answer without it")
        sub_spec = peer.spec
        strategy = (
            strategy_for(sub_spec, override=slot.memory_override)
            if slot.memory_override is not None
            else None
        )
        event = InboundEvent(
            agent=name,
            conversation_key=subagent_key(runtime.name, call.conversation_key),
            text=task,
            channel=CHANNEL,
            user_id=call.user_id,
        )
        token = _CALLERS.set(chain)
        try:
            reply = await peer.handle_with(event, sub_spec, strategy, parent_run_id=call.run_id)
        finally:
            _CALLERS.reset(token)
        if reply.error is not None:
            raise ToolError(f"{name} could not answer: {reply.text}")
        return reply.text

    task = {"type": "string", "description": "what the agent should do, with everything it needs to know"}
    return Tool(ToolSpec(tool_name(name), _description(runtime, slot), object_schema({"task": task})), ask)
