"""The persistent-memory tools the model can call: remember, recall, list_memories, forget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.memory.persistent import PersistentMemory
from agentd.providers.base import ToolSpec
from agentd.tools.base import Tool, ToolCall, object_schema

KEY = frozenset({"key"})  # a memory's key names a fact: no secret, though "key" reads like one


def _string(description: str) -> dict[str, Any]:
    """A string parameter's schema (its name is the key it is given under in object_schema)."""
    return {"type": "string", "description": description}


def memory_tools(
    memory: PersistentMemory,
    scope_of: Callable[[ToolCall], str],
    linked_of: Callable[[ToolCall], tuple[str, ...]] = lambda call: (),
) -> list[Tool]:
    """remember / recall / list_memories / forget over the agent's memories table: written in the
    caller's scope, read (and forgotten) in theirs and the linked accounts' (`linked_of`)."""

    async def remember(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.remember(
            args.get("key"),
            args.get("value"),
            scope=scope_of(call),
            conversation_key=call.conversation_key,
            run_id=call.run_id,
        )

    async def recall(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.recall(args.get("key"), scope=scope_of(call), linked=linked_of(call))

    async def list_memories(args: dict[str, Any], call: ToolCall) -> str:
        return memory.list(scope=scope_of(call), linked=linked_of(call))

    async def forget(args: dict[str, Any], call: ToolCall) -> str:
        return await memory.forget(
            args.get("key"),
            scope=scope_of(call),
            conversation_key=call.conversation_key,
            run_id=call.run_id,
            linked=linked_of(call),
        )

    key = _string("1-64 characters: letters, digits, '_', '.', ':' or '-'")
    value = _string(f"the fact to keep, at most {memory.max_value_chars} characters")

    obj = object_schema

    return [
        Tool(
            ToolSpec(
                "remember",
                "Save or update a fact that must outlive this conversation.",
                obj({"key": key, "value": value}),
            ),
            remember,
            private_args=frozenset({"value"}),  # memory values stay out of the audit trail
            plain_args=KEY,  # the memory key is what an approver of `remember` must read
        ),
        Tool(
            ToolSpec("recall", "Read the value of one remembered fact by key.", obj({"key": key})),
            recall,
            plain_args=KEY,
        ),
        Tool(ToolSpec("list_memories", "List the keys of every remembered fact.", obj({})), list_memories),
        Tool(
            ToolSpec("forget", "Delete a remembered fact by key.", obj({"key": key})), forget, plain_args=KEY
        ),
    ]
