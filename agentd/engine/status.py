"""The status facts of a conversation: for `/status`, `GET /agents/{agent}/status` and the inspector."""

from __future__ import annotations

import time
from typing import Any

from agentd.engine.approvals import describe_pending
from agentd.engine.conversation import Conversation
from agentd.engine.model_chain import chain_facts
from agentd.engine.state import AgentState
from agentd.memory.base import TurnInput
from agentd.messages import estimate_tokens
from agentd.store.queries import MessageCounts, RunTotals
from agentd.store.records import StoredThread
from agentd.tools.policy import Policy


def waiting_facts(state: AgentState, conversation_key: str) -> dict[str, Any]:
    """The approvals this conversation waits for, and how many messages wait behind them."""
    now = time.time()
    records = sorted(
        (r for r in state.waiting_approvals.values() if r.conversation_key == conversation_key),
        key=lambda r: r.created_at,
    )
    return {
        "approvals": [describe_pending(r, now) for r in records],
        # the paused run holds the conversation: every other holder of its lock is a message in line
        "messages_waiting": state.locks.waiting(conversation_key) if records else 0,
    }


def tools_report(state: AgentState) -> dict[str, Any]:
    """Every tool of the agent with where it comes from and what the policy decides, and its servers."""
    spec = state.spec
    policy = Policy.of(spec)
    memory = state.memory_of(spec, "")
    thread = StoredThread("")
    extra = memory.tools.tools(state.context, thread, TurnInput("", "", None)) if memory.tools else ()
    tools = []
    for tool in (*state.tools(spec), *extra):
        ruling = policy.ruling(tool)
        tools.append(
            {
                "name": tool.name,
                "source": tool.source,
                "server": tool.server,
                "origin": tool.origin_name,
                "decision": ruling.decision,
                "rule": ruling.rule,
                "offered": ruling.offered,
                "hints": dict(tool.hints),  # what its MCP server's annotations state
                "description": tool.spec.description,
            }
        )
    return {"agent": spec.name, "tools": tools, "servers": state.tool_servers.describe()}


async def status_facts(conv: Conversation) -> dict[str, Any]:
    state, spec, memory, thread, key = conv.agent, conv.spec, conv.memory, conv.thread, conv.key
    totals, counts = await state.store.read_many(RunTotals(key), MessageCounts(key))
    threshold = memory.compaction.compact_at_tokens if memory.compaction is not None else None
    return {
        "agent": spec.name,
        "model": spec.model.name,
        "small_model": spec.model.small,
        # the fallback chain and each model's breaker: `skipped` while a failing model is passed over
        "model_chain": chain_facts(state.resources.breakers, spec.model.chain),
        "offline": spec.model.provider == "offline",
        "conversation_key": key,
        "thread_id": thread.id,
        "memory": {
            "scope": spec.memory.scope,
            "persistent": spec.memory.persistent,
            "strategy": memory.kind,
        },
        "context": {
            # the last model call's input, or an estimate of what is in view now (after a compaction)
            "tokens": thread.last_input_tokens
            if thread.last_input_tokens is not None
            else estimate_tokens(len(spec.purpose) + thread.chars),
            "estimated": thread.last_tokens_estimated or thread.last_input_tokens is None,
            "compact_at_tokens": threshold,
            "messages": len(thread.messages),
            "summary": thread.summary is not None,
        },
        "stored": counts,
        "totals": {
            "message_runs": totals.get("message", {}).get("runs", 0),
            "compactions": totals.get("compaction", {}).get("runs", 0),
            "scheduled_runs": totals.get("schedule", {}).get("runs", 0),  # jobs' tasks and reminders
            "errors": sum(t["errors"] for t in totals.values()),
            "input_tokens": sum(t["input_tokens"] for t in totals.values()),
            "output_tokens": sum(t["output_tokens"] for t in totals.values()),
            "by_trigger": totals,
        },
        # memory models that failed lately (daemon-wide): open breakers pause their after-run work
        "memory_models": state.resources.breakers.describe(),
        **waiting_facts(state, key),
    }
