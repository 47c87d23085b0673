"""One message turn: prompt -> model/tool loop -> one commit -> reply.

The reply is returned only after the person's message, the assistant
message(s), the tool calls and results, the run row, the audit rows and the
delivery id are committed together. A provider failure still commits what
happened (the person's message, any completed tool steps, the run as error)
and answers with a short error; nothing already stored is touched.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

from agentd.config.models import AgentSpec
from agentd.engine.tools import memory_tools, run_tool_calls
from agentd.errors import OperatorError, ProviderError
from agentd.events import InboundEvent, Reply
from agentd.memory.base import MemoryStrategy, TurnInput, speaker_partition
from agentd.memory.persistent import AGENT_SCOPE, memory_preamble
from agentd.memory.tooling import Tool, ToolCall
from agentd.messages import Message, MessageSequence, ToolResultPart, estimate_tokens
from agentd.providers.base import CompletionRequest
from agentd.store.inbound import record_event
from agentd.store.runs import RunRecord, insert_run
from agentd.store.transcripts import (
    StoredMessage,
    StoredThread,
    append_messages,
    create_thread,
    set_thread_usage,
)

if TYPE_CHECKING:
    from agentd.engine.runtime import AgentRuntime

log = logging.getLogger(__name__)


def build_system(purpose: str, sections: list[str]) -> str:
    return "\n\n".join(s for s in (purpose.strip(), *sections) if s)


def persistent_scope(spec: AgentSpec, conversation_key: str, user_id: str | None) -> str:
    """Whose persistent facts a turn reads and writes: the agent's, or only the speaker's."""
    if spec.memory.persistent_scope == "user":
        return speaker_partition(conversation_key, user_id)
    return AGENT_SCOPE


def agent_tools(runtime: AgentRuntime, spec: AgentSpec) -> list[Tool]:
    """The tools every turn of this definition gets (memory tools, sub-agents)."""
    from agentd.engine.subagents import subagent_tools

    cached = runtime.tools_cache
    if cached is None or cached[0] is not spec:
        # Memory tools depend only on the definition: built once per definition, not per turn.
        built: list[Tool] = []
        if spec.memory.persistent:
            built = memory_tools(
                runtime.memory, lambda call: persistent_scope(spec, call.conversation_key, call.user_id)
            )
        cached = runtime.tools_cache = (spec, built)
    # Sub-agent tools describe peers, which reload on their own: built per turn (none: free).
    return [*cached[1], *subagent_tools(runtime, spec)] if spec.subagents else cached[1]


async def run_turn(
    runtime: AgentRuntime,
    spec: AgentSpec,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
    parent_run_id: str | None = None,
) -> Reply:
    started = time.time()
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=event.conversation_key,
        trigger="message",
        model=spec.model.name,
        status="ok",
        started_at=started,
        thread_id=thread.id,
        parent_run_id=parent_run_id,
    )
    turn = TurnInput(event.conversation_key, event.text, event.user_id)
    view = await strategy.view(runtime, thread, turn)
    for note in view.notes:
        log.info("agent %s run %s: %s", runtime.name, run.id, note)
    sections = list(view.system_sections)
    if spec.memory.persistent:
        scope = persistent_scope(spec, event.conversation_key, event.user_id)
        sections.append(memory_preamble(runtime.memory.keys(scope)))
    system = build_system(spec.purpose, sections)
    tools = {t.spec.name: t for t in [*agent_tools(runtime, spec), *strategy.tools(runtime, thread, turn)]}
    tool_specs = [t.spec for t in tools.values()]
    history = (
        view.messages if isinstance(view.messages, MessageSequence) else MessageSequence(list(view.messages))
    )
    history_chars = view.chars if view.chars is not None else sum(m.char_count() for m in history)
    fixed_chars = len(system) + sum(
        len(t.name) + len(t.description) + len(str(t.parameters)) for t in tool_specs
    )

    new: list[Message] = [Message.user(event.text, event.user_id)]
    new_chars = new[0].char_count()
    reply_text = ""
    error: str | None = None
    steps = 0
    try:
        provider, model = runtime.providers.resolve(spec.model.name)
        while True:
            allow_tools = steps < spec.max_tool_steps
            request = CompletionRequest(
                model=model,
                system=system,
                messages=history.extended(new),
                tools=tool_specs if allow_tools else (),
                temperature=spec.model.temperature,
                max_output_tokens=spec.model.max_output_tokens,
            )
            completion = await provider.complete(request)
            run.model_calls += 1
            if completion.usage is not None:
                run.input_tokens += completion.usage.input_tokens
                run.output_tokens += completion.usage.output_tokens
                run.last_input_tokens = completion.usage.input_tokens
            else:
                estimated_in = estimate_tokens(fixed_chars + history_chars + new_chars)
                run.input_tokens += estimated_in
                run.output_tokens += estimate_tokens(completion.message.char_count())
                run.last_input_tokens = estimated_in
                run.tokens_estimated = True
            answer = completion.message
            new.append(answer)
            new_chars += answer.char_count()
            calls = answer.tool_calls
            if not calls:
                reply_text = answer.text
                break
            if not allow_tools:
                # The model called tools although none were offered: answer each call with an
                # error so the stored transcript stays well-formed (every call has its result).
                new.append(
                    Message(
                        role="tool",
                        parts=tuple(
                            ToolResultPart(
                                call_id=c.id,
                                name=c.name,
                                content=f"not run: the limit of {spec.max_tool_steps} tool steps was reached",
                                is_error=True,
                            )
                            for c in calls
                        ),
                    )
                )
                reply_text = answer.text or f"(stopped after {spec.max_tool_steps} tool steps)"
                break
            results = await run_tool_calls(
                tools, calls, ToolCall(event.conversation_key, run.id, event.user_id)
            )
            new.append(results)
            new_chars += results.char_count()
            steps += 1
    except (ProviderError, OperatorError) as e:
        run.status, run.error = "error", str(e)
        error = "provider_error"
        reply_text = (
            f"Sorry, I could not reach the model just now ({e}). Your message is saved; please try again."
        )
        log.warning("agent %s run %s failed: %s", runtime.name, run.id, e)
    if not reply_text and error is None:
        reply_text = "(the model returned an empty reply)"
    run.duration_ms = (time.time() - started) * 1000
    await _commit(runtime, strategy, thread, event, run, new)
    return Reply(text=reply_text, conversation_key=event.conversation_key, run_id=run.id, error=error)


async def _commit(
    runtime: AgentRuntime,
    strategy: MemoryStrategy,
    thread: StoredThread,
    event: InboundEvent,
    run: RunRecord,
    new: list[Message],
) -> None:
    keep = strategy.keeps_transcript
    stored = [StoredMessage(thread.next_seq + i, m, run.id) for i, m in enumerate(new)] if keep else []
    usage = run.last_input_tokens
    now = time.time()
    key = event.conversation_key

    def commit(conn):  # type: ignore[no-untyped-def]
        thread_id = thread.id
        if keep:
            if thread_id is None:
                thread_id = create_thread(conn, key, now)
            append_messages(conn, thread_id, stored, now)
            if run.model_calls:
                set_thread_usage(conn, thread_id, usage, run.tokens_estimated)
        run.thread_id = thread_id
        insert_run(conn, run)
        if event.event_id is not None:
            record_event(conn, event.channel, event.event_id, key, run.id, now)
        return thread_id

    thread_id = await runtime.store.write(commit)
    # Only now, with everything committed, does the hot thread change.
    if keep:
        thread.id = thread_id
        thread.messages.extend(stored)
        thread.next_seq += len(stored)
        thread.chars += sum(m.message.char_count() for m in stored)
        if run.model_calls:
            thread.last_input_tokens, thread.last_tokens_estimated = usage, run.tokens_estimated
