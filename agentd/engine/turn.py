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
from dataclasses import replace

from agentd.config.models import AgentSpec
from agentd.engine.prompt import build_prompt, build_system
from agentd.engine.state import AgentState
from agentd.engine.streaming import StepSink, call_model
from agentd.engine.tools import run_tool_calls
from agentd.errors import OperatorError, ProviderError
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.memory.base import Memory, MemoryContext, TurnInput
from agentd.memory.screening import transcript_copy
from agentd.memory.tooling import ToolCall
from agentd.messages import Message, ToolResultPart, estimate_tokens
from agentd.providers.base import CompletionRequest
from agentd.run_context import current_run
from agentd.store.records import RunRecord, StoredMessage, StoredThread
from agentd.store.writes import AppendAudit, CommitTurn, Delivery

log = logging.getLogger(__name__)


async def run_turn(
    state: AgentState,
    ctx: MemoryContext,
    spec: AgentSpec,
    memory: Memory,
    thread: StoredThread,
    event: InboundEvent,
    parent_run_id: str | None = None,
    *,
    sink: ReplySink | None = None,
    instructions: str = "",
) -> Reply:
    """`sink` hears the reply as it is written; `instructions` are appended to the system prompt
    of this turn only (an API client's own system messages)."""
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
    current_run.set(run.id)  # every line logged from here on in this task names the run
    prompt = await build_prompt(
        state,
        ctx,
        spec,
        memory,
        thread,
        TurnInput(event.conversation_key, event.text, event.user_id, event.sent_at),
    )
    if instructions:
        prompt = replace(prompt, system=build_system(prompt.system, [instructions]))
    for note in prompt.notes:
        log.info("agent %s run %s: %s", state.name, run.id, note)
    tools, tool_specs, history = prompt.tools, prompt.tool_specs, prompt.history
    step_sink = None if sink is None else StepSink(sink, f"agent {state.name} run {run.id}")
    fixed_chars, history_chars = prompt.fixed_chars(), prompt.history_chars

    new: list[Message] = [Message.user(event.text, event.user_id, event.sent_at)]
    new_chars = new[0].char_count()
    reply_text = ""
    error: str | None = None
    steps = 0
    try:
        provider, model = state.resources.providers.resolve(spec.model.name)
        while True:
            allow_tools = steps < spec.max_tool_steps
            request = CompletionRequest(
                model=model,
                system=prompt.system,
                messages=history.extended(new),
                tools=tool_specs if allow_tools else (),
                temperature=spec.model.temperature,
                max_output_tokens=spec.model.max_output_tokens,
                hints=prompt.hints,
            )
            completion = await call_model(provider, request, step_sink)
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
            if step_sink is not None:
                step_sink.restart()  # the text of this step was not the reply: tools come first
            results = await run_tool_calls(
                tools, calls, ToolCall(event.conversation_key, run.id, event.user_id, event.sent_at)
            )
            new.append(results)
            new_chars += results.char_count()
            steps += 1
    except (ProviderError, OperatorError) as e:
        if step_sink is not None:
            step_sink.restart()  # a stream broken off half-way is no answer
        run.status, run.error = "error", str(e)
        error = "provider_error"
        reply_text = (
            f"Sorry, I could not reach the model just now ({e}). Your message is saved; please try again."
        )
        log.warning("agent %s run %s failed: %s", state.name, run.id, e)
    if not reply_text and error is None:
        reply_text = "(the model returned an empty reply)"
    run.duration_ms = (time.time() - started) * 1000
    await _commit(state, memory, thread, event, run, new, spec.transcripts.redact_secrets)
    return Reply(text=reply_text, conversation_key=event.conversation_key, run_id=run.id, error=error)


async def _commit(
    state: AgentState,
    memory: Memory,
    thread: StoredThread,
    event: InboundEvent,
    run: RunRecord,
    new: list[Message],
    redact_secrets: bool = False,
) -> None:
    keep = memory.keeps_transcript
    # transcripts.redact_secrets: the stored copy (which later turns replay) has secrets redacted;
    # the model of this turn saw them as sent
    kept, audits = (
        transcript_copy(new, event.conversation_key, run.id) if keep and redact_secrets else (new, [])
    )
    stored = [StoredMessage(thread.next_seq + i, m, run.id) for i, m in enumerate(kept)] if keep else []
    usage = (run.last_input_tokens, run.tokens_estimated) if run.model_calls else None
    delivery = (
        Delivery(event.channel, event.event_id, event.conversation_key)
        if event.event_id is not None
        else None
    )
    now = time.time()
    op = CommitTurn(event.conversation_key, thread.id, stored, run, usage, delivery, now)
    thread_id, *_ = await state.store.write(op, *([AppendAudit(state.name, audits, now)] if audits else []))
    run.thread_id = thread_id
    # Only now, with everything committed, does the hot thread change.
    if keep:
        thread.id = thread_id
        thread.messages.extend(stored)
        thread.next_seq += len(stored)
        thread.chars += sum(m.message.char_count() for m in stored)
        if usage is not None:
            thread.last_input_tokens, thread.last_tokens_estimated = usage
