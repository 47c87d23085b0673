"""Tools the model can call, and running a batch of tool calls into one tool message."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from agentd.errors import ToolError
from agentd.memory.persistent import PersistentMemory
from agentd.memory.tooling import Tool, ToolCall, object_schema
from agentd.messages import Message, ToolCallPart, ToolResultPart
from agentd.providers.base import ToolSpec

log = logging.getLogger(__name__)


async def run_tool_calls(tools: Mapping[str, Tool], calls: list[ToolCallPart], context: ToolCall) -> Message:
    """Run each call in order; a refused or failing call becomes an error result the model can read."""
    results = []
    for call in calls:
        tool = tools.get(call.name)
        try:
            if tool is None:
                raise ToolError(
                    f"there is no tool named {call.name!r}; available: {', '.join(tools) or 'none'}"
                )
            content, is_error = await tool.handler(call.arguments, context), False
        except ToolError as e:
            content, is_error = str(e), True
        except Exception:
            log.exception("tool %s failed", call.name)
            content, is_error = f"the tool {call.name} failed with an internal error", True
        results.append(ToolResultPart(call_id=call.id, name=call.name, content=content, is_error=is_error))
    return Message(role="tool", parts=tuple(results))


def _string(name: str, description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def memory_tools(memory: PersistentMemory, scope_of: Callable[[ToolCall], str]) -> list[Tool]:
    """remember / recall / list_memories / forget over the agent's memories table."""

    async def remember(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.remember(
            args.get("key"),
            args.get("value"),
            scope=scope_of(call),
            conversation_key=call.conversation_key,
            run_id=call.run_id,
        )

    async def recall(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.recall(args.get("key"), scope=scope_of(call))

    async def list_memories(args: dict[str, Any], call: ToolCall) -> str:
        return memory.list(scope=scope_of(call))

    async def forget(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.forget(
            args.get("key"), scope=scope_of(call), conversation_key=call.conversation_key, run_id=call.run_id
        )

    key = _string("key", "1-64 characters: letters, digits, '_', '.', ':' or '-'")
    value = _string("value", f"the fact to keep, at most {memory.max_value_chars} characters")

    obj = object_schema

    return [
        Tool(
            ToolSpec(
                "remember",
                "Save or update a fact that must outlive this conversation.",
                obj({"key": key, "value": value}),
            ),
            remember,
        ),
        Tool(ToolSpec("recall", "Read the value of one remembered fact by key.", obj({"key": key})), recall),
        Tool(ToolSpec("list_memories", "List the keys of every remembered fact.", obj({})), list_memories),
        Tool(ToolSpec("forget", "Delete a remembered fact by key.", obj({"key": key})), forget),
    ]
