"""The commands every channel understands: /compact /new /reset /status /stop /model /help.

Each command is recorded as a run (trigger `command`) and an audit event,
committed together with what it changed.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from agentd.engine import link_commands
from agentd.engine.command_result import Command, CommandResult
from agentd.engine.conversation import Conversation
from agentd.engine.job_commands import jobs_command
from agentd.engine.metering import Served
from agentd.engine.model_command import model_answer
from agentd.engine.status import status_facts
from agentd.engine.stop_anywhere import stop_anywhere
from agentd.engine.stop_request import BY_COMMAND, Stop
from agentd.engine.usage import own_usage
from agentd.errors import ModelPaused
from agentd.events import COMMANDS, InboundEvent, Reply
from agentd.store.records import AuditRecord, RunRecord, StoredThread
from agentd.store.writes import (
    AppendAudit,
    ArchiveThread,
    DeleteTranscript,
    Delivery,
    InsertRun,
    RecordDelivery,
    Write,
)

_COMMAND_RE = re.compile(r"^/([A-Za-z_]+)(?:@\S+)?(?:\s+(.*))?$", re.S)


def is_command(text: str) -> bool:
    return text.startswith("/") and _COMMAND_RE.match(text.strip()) is not None


def command_name(text: str) -> str | None:
    """The command's name, lower case (`/Status@bot` -> status), or None when `text` is no command."""
    match = _COMMAND_RE.match(text.strip()) if text.startswith("/") else None
    return match.group(1).lower() if match else None


async def _help(conv: Conversation, event: InboundEvent) -> CommandResult:
    lines = [f"/{name} — {what}" for name, what in COMMANDS.items()]
    return CommandResult("Commands:\n" + "\n".join(lines), "help")


NO_HISTORY = "This agent keeps no conversation history (memory.scope is none), so there is nothing to {what}."


async def _compact(conv: Conversation, event: InboundEvent) -> CommandResult:
    memory = conv.memory
    if not memory.keeps_transcript:
        return CommandResult(NO_HISTORY.format(what="compact"), "compact", {"result": "no_history"})
    if memory.compaction is None:
        # Other strategies bound the context themselves (a window, Σ, a rolling summary) and read
        # the transcript by cursor; compacting it under them could drop messages not yet folded.
        return CommandResult(
            f"This agent's memory ({memory.kind}) keeps its context small by itself; /compact applies "
            "to the full transcript only.",
            "compact",
            {"result": "not_applicable", "strategy": memory.kind},
        )
    try:
        outcome = await memory.compaction.compact(conv.ctx, conv.thread, "command")
    except ModelPaused as e:  # a budget refused the summary (or its model is paused): said, not raised
        return CommandResult(str(e), "compact", {"result": "paused"})
    if outcome.status == "ok":
        text = f"Compacted {outcome.compacted_messages} older messages into a summary; the last two turns are kept verbatim."
    elif outcome.status == "nothing_to_compact":
        text = "Nothing to compact yet: this conversation has two turns or fewer."
    else:
        text = f"Compaction failed and the transcript is unchanged: {outcome.error}"
    return CommandResult(text, "compact", {"result": outcome.status}, run_id=outcome.run_id)


async def _new(conv: Conversation, event: InboundEvent) -> CommandResult:
    thread = conv.thread
    if not conv.memory.keeps_transcript:
        return CommandResult(NO_HISTORY.format(what="archive"), "new", {"result": "no_history"})
    if thread.id is None:
        return CommandResult("This conversation is already on a fresh thread.", "new", {"result": "empty"})
    old_id = thread.id

    def after() -> None:
        conv.agent.threads.put(StoredThread(thread.conversation_key))

    return CommandResult(
        f"Started a new thread. The previous one (thread {old_id}) is archived in the agent's data file.",
        "new",
        {"archived_thread": old_id},
        effects=[ArchiveThread(old_id, time.time())],
        after=after,
    )


async def _reset(conv: Conversation, event: InboundEvent) -> CommandResult:
    thread = conv.thread
    if not conv.memory.keeps_transcript:
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
        effects=[DeleteTranscript(thread_id)],
        after=after,
    )


async def _status(conv: Conversation, event: InboundEvent) -> CommandResult:
    spec = conv.spec
    facts = await status_facts(conv)
    ctx = facts["context"]
    size = f"{ctx['tokens']} tokens"
    if ctx["estimated"]:
        size += " (estimated)"
    threshold = ctx["compact_at_tokens"]
    memory, totals = facts["memory"], facts["totals"]
    lines = [
        f"Agent: {facts['agent']}",
        f"Model: {facts['model']}"
        + (" (offline: the built-in model, no network)" if facts["offline"] else ""),
        f"Conversation: {facts['conversation_key']} (thread {facts['thread_id'] or 'not started'})",
        f"Memory: {memory['strategy']} (scope {memory['scope']}, persistent memory "
        f"{'on' if memory['persistent'] else 'off'})",
        f"Messages in view: {ctx['messages']}" + (" plus a summary of older turns" if ctx["summary"] else ""),
        f"Context: {size}"
        + (f" of {threshold} before compaction" if threshold else " (auto-compaction off)"),
        f"Runs: {counted(totals['message_runs'], 'message')}, {counted(totals['compactions'], 'compaction')}, "
        + (f"{counted(totals['scheduled_runs'], 'scheduled run')}, " if totals["scheduled_runs"] else "")
        + f"{counted(totals['errors'], 'error')}; tokens in {totals['input_tokens']}, "
        f"out {totals['output_tokens']}",
    ]
    if spec.memory.persistent:
        keys = conv.agent.memory_keys(spec, event.conversation_key, event.user_id, event.linked_user_ids)
        lines.append(f"Persistent memory keys: {len(keys)}")
    if len(facts["model_chain"]) > 1:
        lines.insert(2, "Fallbacks: " + ", ".join(link["model"] for link in facts["model_chain"][1:]))
    for link in facts["model_chain"]:
        if link["skipped"]:
            lines.append(
                f"Model {link['model']}: skipped for {link['retry_in_s']:g} s after "
                f"{counted(link['failures'], 'failure')}, the next of its fallbacks answers "
                f"({link['last_error']})"
            )
    chain = {link["model"] for link in facts["model_chain"]}
    for ref, breaker in facts["memory_models"].items():
        if breaker["state"] == "open" and ref not in chain:
            lines.append(
                f"Memory model {ref}: paused after {counted(breaker['failures'], 'failure')}, "
                f"retrying in {breaker['retry_in_s']:g} s; the chat goes on ({breaker['last_error']})"
            )
    for approval in facts["approvals"]:
        lines.append(
            f"Waiting for approval [{approval['id']}]: {approval['summary']}, asked by "
            f"{approval['requested_by']}; expires in {max(1, round(approval['expires_in_s'] / 60))} min "
            f"(/approve {approval['id']} or /deny {approval['id']})"
        )
    if facts["approvals"]:
        waiting = facts["messages_waiting"]
        lines.append(
            f"{counted(waiting, 'later message')} of this conversation "
            f"{'waits' if waiting == 1 else 'wait'} in order behind it"
        )
    return CommandResult("\n".join(lines), "status")


async def _stop(conv: Conversation, event: InboundEvent) -> CommandResult:
    # the turn running here or on another daemon sharing the store, or the run waiting for an approval
    stopped = await stop_anywhere(conv.agent, conv.key, Stop(BY_COMMAND, by=event.who))
    if stopped is None:
        return CommandResult(
            "Nothing is running in this conversation.", "stop", {"result": "nothing_running"}
        )
    return CommandResult(
        "Stopped. Your message is saved; send the next one.",
        "stop",
        {"result": "stopped", "stopped_run": stopped.run_id, "daemon": stopped.daemon},
    )


async def _model(conv: Conversation, event: InboundEvent) -> CommandResult:
    match = _COMMAND_RE.match(event.text.strip())
    answer = model_answer(conv, (match.group(2) or "").strip() if match else "")
    state, key = conv.agent, conv.key

    def after() -> None:
        state.chosen_models[key] = answer.chosen

    return CommandResult(
        answer.text, "model", answer.data, effects=answer.effects, after=after if answer.switched else None
    )


async def _jobs(conv: Conversation, event: InboundEvent) -> CommandResult:
    text, data = await jobs_command(conv, event)
    return CommandResult(text, "jobs", data)


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


async def _usage(conv: Conversation, event: InboundEvent) -> CommandResult:
    meter = conv.agent.resources.meter
    if meter is None or event.who is None:
        return CommandResult("Usage is counted per person: this message names nobody.", "usage")
    return CommandResult(await own_usage(meter, conv.agent.name, Served(event.who, event.channel)), "usage")


# what runs each of agentd.events.COMMANDS but /approve and /deny (agentd/engine/approval_commands.py)
HANDLERS: dict[str, Command] = {
    "compact": _compact,
    "new": _new,
    "reset": _reset,
    "status": _status,
    "usage": _usage,
    "stop": _stop,
    "model": _model,
    "help": _help,
    "link": link_commands.link,
    "unlink": link_commands.unlink,
    "whoami": link_commands.whoami,
    "jobs": _jobs,
}


async def run_command(conv: Conversation, event: InboundEvent) -> Reply:
    match = _COMMAND_RE.match(event.text.strip())
    assert match is not None
    name = match.group(1).lower()
    started = time.time()
    command = HANDLERS.get(name)
    if command is None:
        result = CommandResult(
            f"Unknown command /{name}. " + (await _help(conv, event)).text, "unknown", {"command": name}
        )
    else:
        result = await command(conv, event)
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=event.conversation_key,
        trigger="command",
        model=None,
        status="ok",
        started_at=started,
        thread_id=conv.thread.id,
        duration_ms=(time.time() - started) * 1000,
    )
    audit = AuditRecord("command", result.action, event.conversation_key, run.id, {**result.data})
    if event.user_id:
        audit.data["user_id"] = event.user_id
    now = time.time()
    ops: list[Write[Any]] = [*result.effects, InsertRun(run), AppendAudit(conv.agent.name, [audit], now)]
    if event.event_id is not None:
        ops.append(
            RecordDelivery(Delivery(event.channel, event.event_id, event.conversation_key), run.id, now)
        )
    await conv.agent.store.write(*ops)
    if result.after is not None:
        result.after()
    return Reply(text=result.text, conversation_key=event.conversation_key, run_id=result.run_id or run.id)
