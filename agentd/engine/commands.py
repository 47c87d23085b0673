"""The history commands every channel understands: /compact /new /reset /status /help.

Each command is recorded as a run (trigger `command`) and an audit event,
committed together with what it changed.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd.config.models import AgentSpec
from agentd.engine.turn import persistent_scope
from agentd.events import InboundEvent, Reply
from agentd.memory.base import MemoryStrategy
from agentd.messages import estimate_tokens
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.inbound import record_event
from agentd.store.runs import RunRecord, insert_run, run_totals
from agentd.store.transcripts import StoredThread, archive_thread, count_messages, delete_transcript

if TYPE_CHECKING:
    from agentd.engine.runtime import AgentRuntime

_COMMAND_RE = re.compile(r"^/([A-Za-z_]+)(?:@\S+)?(?:\s+(.*))?$", re.S)

HELP = {
    "compact": "summarise older turns now, keeping the last two verbatim",
    "new": "archive this conversation's thread and start a fresh one",
    "reset": "delete this conversation's transcript",
    "status": "show the agent, model, context size and totals",
    "help": "list these commands",
}


def is_command(text: str) -> bool:
    return text.startswith("/") and _COMMAND_RE.match(text.strip()) is not None


@dataclass
class CommandResult:
    text: str
    action: str
    data: dict[str, Any] = field(default_factory=dict)
    effect: Callable[[Any], object] | None = None  # extra SQL committed with the run and audit rows
    after: Callable[[], None] | None = None  # hot-state change once committed
    run_id: str | None = None  # when the command produced its own run (compaction)


Command = Callable[
    ["AgentRuntime", AgentSpec, MemoryStrategy, StoredThread, InboundEvent], Awaitable[CommandResult]
]


async def _help(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> CommandResult:
    lines = [f"/{name} — {what}" for name, what in HELP.items()]
    return CommandResult("Commands:\n" + "\n".join(lines), "help")


NO_HISTORY = "This agent keeps no conversation history (memory.scope is none), so there is nothing to {what}."


async def _compact(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> CommandResult:
    if not strategy.keeps_transcript:
        return CommandResult(NO_HISTORY.format(what="compact"), "compact", {"result": "no_history"})
    if strategy.kind != "full":
        # Other strategies bound the context themselves (a window, Σ, a rolling summary) and read
        # the transcript by cursor; compacting it under them could drop messages not yet folded.
        return CommandResult(
            f"This agent's memory ({strategy.kind}) keeps its context small by itself; /compact applies "
            "to the full transcript only.",
            "compact",
            {"result": "not_applicable", "strategy": strategy.kind},
        )
    outcome = await runtime.compact(thread, reason="command")
    if outcome.status == "ok":
        text = f"Compacted {outcome.compacted_messages} older messages into a summary; the last two turns are kept verbatim."
    elif outcome.status == "nothing_to_compact":
        text = "Nothing to compact yet: this conversation has two turns or fewer."
    else:
        text = f"Compaction failed and the transcript is unchanged: {outcome.error}"
    return CommandResult(text, "compact", {"result": outcome.status}, run_id=outcome.run_id)


async def _new(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> CommandResult:
    if not strategy.keeps_transcript:
        return CommandResult(NO_HISTORY.format(what="archive"), "new", {"result": "no_history"})
    if thread.id is None:
        return CommandResult("This conversation is already on a fresh thread.", "new", {"result": "empty"})
    old_id, now = thread.id, time.time()

    def after() -> None:
        runtime.threads.put(StoredThread(thread.conversation_key))

    return CommandResult(
        f"Started a new thread. The previous one (thread {old_id}) is archived in the agent's data file.",
        "new",
        {"archived_thread": old_id},
        effect=lambda conn: archive_thread(conn, old_id, now),
        after=after,
    )


async def _reset(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> CommandResult:
    if not strategy.keeps_transcript:
        return CommandResult(NO_HISTORY.format(what="reset"), "reset", {"result": "no_history"})
    if thread.id is None:
        return CommandResult("There is no transcript to delete.", "reset", {"deleted_messages": 0})
    thread_id = thread.id

    def after() -> None:
        thread.summary, thread.messages = None, []
        thread.layers.clear()  # the memory layers' cached state went with their memory_state rows
        thread.last_input_tokens, thread.last_tokens_estimated = None, False
        thread.recount()

    return CommandResult(
        "Deleted this conversation's transcript.",
        "reset",
        {"thread": thread_id},
        effect=lambda conn: delete_transcript(conn, thread_id),
        after=after,
    )


async def _status(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> CommandResult:
    facts = await status_facts(runtime, spec, strategy, thread)
    ctx = facts["context"]
    size = f"{ctx['tokens']} tokens"
    if ctx["estimated"]:
        size += " (estimated)"
    threshold = ctx["compact_at_tokens"]
    lines = [
        f"Agent: {facts['agent']}",
        f"Model: {facts['model']}"
        + (" (offline: the built-in model, no network)" if facts["offline"] else ""),
        f"Conversation: {facts['conversation_key']} (thread {facts['thread_id'] or 'not started'})",
        f"Memory: {facts['memory']}",
        f"Messages in view: {ctx['messages']}" + (" plus a summary of older turns" if ctx["summary"] else ""),
        f"Context: {size}"
        + (f" of {threshold} before compaction" if threshold else " (auto-compaction off)"),
        f"Runs: {facts['totals']['message_runs']} messages, {facts['totals']['compactions']} compactions, "
        f"{facts['totals']['errors']} errors; tokens in {facts['totals']['input_tokens']}, "
        f"out {facts['totals']['output_tokens']}",
    ]
    if spec.memory.persistent:
        scope = persistent_scope(spec, event.conversation_key, event.user_id)
        lines.append(f"Persistent memory keys: {len(runtime.memory.keys(scope))}")
    return CommandResult("\n".join(lines), "status")


async def status_facts(
    runtime: AgentRuntime, spec: AgentSpec, strategy: MemoryStrategy, thread: StoredThread
) -> dict[str, Any]:
    key = thread.conversation_key
    totals, counts = await runtime.store.read(lambda conn: (run_totals(conn, key), count_messages(conn, key)))
    threshold = getattr(strategy, "compact_at_tokens", None)
    return {
        "agent": spec.name,
        "model": spec.model.name,
        "small_model": spec.model.small,
        "offline": spec.model.provider == "offline",
        "conversation_key": key,
        "thread_id": thread.id,
        "memory": {
            "scope": spec.memory.scope,
            "persistent": spec.memory.persistent,
            "strategy": strategy.kind,
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
            "errors": sum(t["errors"] for t in totals.values()),
            "input_tokens": sum(t["input_tokens"] for t in totals.values()),
            "output_tokens": sum(t["output_tokens"] for t in totals.values()),
            "by_trigger": totals,
        },
    }


COMMANDS: dict[str, Command] = {
    "compact": _compact,
    "new": _new,
    "reset": _reset,
    "status": _status,
    "help": _help,
}


async def run_command(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
) -> Reply:
    match = _COMMAND_RE.match(event.text.strip())
    assert match is not None
    name = match.group(1).lower()
    started = time.time()
    command = COMMANDS.get(name)
    if command is None:
        result = CommandResult(
            f"Unknown command /{name}. " + (await _help(runtime, spec, strategy, thread, event)).text,
            "unknown",
            {"command": name},
        )
    else:
        result = await command(runtime, spec, strategy, thread, event)
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=event.conversation_key,
        trigger="command",
        model=None,
        status="ok",
        started_at=started,
        thread_id=thread.id,
        duration_ms=(time.time() - started) * 1000,
    )
    audit = AuditRecord("command", result.action, event.conversation_key, run.id, {**result.data})
    if event.user_id:
        audit.data["user_id"] = event.user_id
    now = time.time()

    def commit(conn):  # type: ignore[no-untyped-def]
        if result.effect is not None:
            result.effect(conn)
        insert_run(conn, run)
        insert_audit(conn, runtime.name, [audit], now)
        if event.event_id is not None:
            record_event(conn, event.channel, event.event_id, event.conversation_key, run.id, now)

    await runtime.store.write(commit)
    if result.after is not None:
        result.after()
    return Reply(text=result.text, conversation_key=event.conversation_key, run_id=result.run_id or run.id)
