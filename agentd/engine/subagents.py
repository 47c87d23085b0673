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
- the slot's memory_override, when set, replacing the sub-agent's strategy; which
  slot a conversation belongs to is read off its key (`slot_override`), so the
  turn, the inspector and the status all see the same memory.

Delegation is guarded: an agent never calls itself or an agent already above
it in the chain, and a chain is at most MAX_DEPTH calls deep. The chain is
carried in a context variable, which follows the call down because a tool
call awaits the sub-agent's run in the same task.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from typing import Any

from agentd.config.models import AgentSpec, SubagentSpec
from agentd.config.strategies import StrategySpec
from agentd.config.tools import AGENTS_SOURCE, subagent_tool_name
from agentd.engine.peers import Peers
from agentd.errors import ToolError
from agentd.events import InboundEvent, is_conversation_key
from agentd.providers.base import ToolSpec
from agentd.tools.base import Tool, ToolCall, object_schema

MAX_DEPTH = 3
CHANNEL = "agent"
TASK_MAX_CHARS = 20_000
# the agents whose runs are waiting on a sub-agent call further down this task, outermost first
_CALLERS: ContextVar[tuple[str, ...]] = ContextVar("agentd_subagent_callers", default=())


def tool_name(agent: str) -> str:
    return subagent_tool_name(agent)


def subagent_key(caller: str, caller_key: str) -> str:
    """The sub-agent's conversation key for one conversation of the caller."""
    key = f"{CHANNEL}:{caller}:{caller_key}"
    if is_conversation_key(key):
        return key
    # too long for a key once nested: a stable digest of the caller's key instead
    return f"{CHANNEL}:{caller}:sha256-{hashlib.sha256(caller_key.encode()).hexdigest()[:40]}"


def slot_override(agent: str, conversation_key: str, peers: Peers) -> StrategySpec | None:
    """The memory_override of the caller's slot that a sub-agent conversation belongs to, if any.

    A sub-agent conversation's key names its caller (`agent:<caller>:...`); the
    caller's current definition says which memory that slot gives this agent.
    """
    channel, _, rest = conversation_key.partition(":")
    if channel != CHANNEL:
        return None
    caller = peers.spec(rest.partition(":")[0])
    if caller is None:
        return None
    for slot in caller.subagents:
        if slot.agent == agent:
            return slot.memory_override
    return None


def _description(peers: Peers, slot: SubagentSpec) -> str:
    if slot.description:
        return slot.description
    text = f"Ask the agent '{slot.agent}' to carry out a task; returns its answer."
    peer = peers.spec(slot.agent)
    purpose = peer.purpose.strip().splitlines()[0] if peer is not None and peer.purpose else ""
    if purpose:
        text += f" Its purpose: {purpose[:300]}"
    return text


def subagent_tools(caller: str, spec: AgentSpec, peers: Peers) -> list[Tool]:
    return [_tool(caller, peers, slot) for slot in spec.subagents]


def _tool(caller: str, peers: Peers, slot: SubagentSpec) -> Tool:
    name = slot.agent

    async def ask(args: dict[str, Any], call: ToolCall) -> str:
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolError("task must be non-empty text: what you want the agent to do")
        if len(task) > TASK_MAX_CHARS:
            raise ToolError(f"task is {len(task)} characters; the limit is {TASK_MAX_CHARS}. Shorten it.")
        if task.lstrip().startswith("/"):
            raise ToolError("a task cannot start with '/': sub-agents are not given commands")
        chain = (*_CALLERS.get(), caller)
        if name in chain:
            raise ToolError(
                f"refused: {name} is already answering in this chain ({' -> '.join(chain)}); "
                "an agent cannot call itself or an agent that called it"
            )
        if len(chain) > MAX_DEPTH:
            raise ToolError(
                f"refused: sub-agent calls go at most {MAX_DEPTH} deep ({' -> '.join(chain)} -> {name})"
            )
        if not peers.running(name):
            state = "is not running" if peers.spec(name) is not None else "does not exist in this daemon"
            raise ToolError(f"the agent {name!r} {state}; answer without it")
        event = InboundEvent(
            agent=name,
            conversation_key=subagent_key(caller, call.conversation_key),
            text=task,
            channel=CHANNEL,
            user_id=call.user_id,
        )
        token = _CALLERS.set(chain)
        try:
            reply = await peers.delegate(name, event, parent_run_id=call.run_id)
        finally:
            _CALLERS.reset(token)
        if reply.error is not None:
            raise ToolError(f"{name} could not answer: {reply.text}")
        return reply.text

    task = {"type": "string", "description": "what the agent should do, with everything it needs to know"}
    spec = ToolSpec(tool_name(name), _description(peers, slot), object_schema({"task": task}))
    return Tool(spec, ask, source=AGENTS_SOURCE)
