"""One message turn: prompt -> model/tool loop -> one commit -> reply.

The reply is returned only after the person's message, the assistant
message(s), the tool calls and results, the run row, the audit rows and the
delivery id are committed together. A provider failure still commits what
happened (the person's message, any completed tool steps, the run as error)
and answers with a short error; nothing already stored is touched.

A tool call a person must approve pauses the run (agentd.engine.pausing): the
reply is then the approval request, and the run is resumed (`run_turn(resume=...)`)
from its saved progress once someone decides or the request expires; the one
commit happens at the end, as for any run.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentd.engine.conversation import Conversation
from agentd.engine.media import Intake, take_media
from agentd.engine.media_replay import images_for
from agentd.engine.metering import SERVED, BudgetExceeded
from agentd.engine.overflow import MessageTooLarge, OverflowGuard
from agentd.engine.pausing import TurnResult, pause_run
from agentd.engine.progress import Decision, ToolBatch, TurnProgress
from agentd.engine.prompt import Prompt, build_prompt, build_system
from agentd.engine.scheduled import ScheduledRun
from agentd.engine.stop_request import StoppedWaiting
from agentd.engine.stopping import stopped_turn
from agentd.engine.streaming import StepSink
from agentd.engine.subagents import CHANNEL as SUBAGENT_CHANNEL
from agentd.engine.tool_files import ToolFiles, reply_files
from agentd.engine.tool_gate import ToolGate
from agentd.engine.turn_calls import ModelChain
from agentd.errors import CONTEXT_OVERFLOW, OperatorError, ProviderError
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.memory.base import TurnInput
from agentd.memory.screening import transcript_copy
from agentd.messages import Message, ToolResultPart, estimate_tokens
from agentd.providers.base import CompletionRequest
from agentd.run_context import current_run
from agentd.store.records import AuditRecord, RunRecord, StoredMessage
from agentd.store.writes import AppendAudit, CloseApproval, CommitTurn, Delivery, RecordDelivery, Write
from agentd.tools.base import ToolCall

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """What a caller asks of this turn's model calls: stop sequences, and at most this many output
    tokens (the OpenAI-compatible API's `stop` and `max_tokens`)."""

    stop: tuple[str, ...] = ()
    max_output_tokens: int | None = None


NO_LIMITS = TurnLimits()


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """How this run is answered: a sink for the reply as it is written, extra instructions for this
    turn, and whether a person can be asked to approve a call."""

    sink: ReplySink | None = None
    instructions: str = ""
    can_ask: bool = True
    # a caller's limits for this turn; the agent file's max_output_tokens still caps every call
    limits: TurnLimits = NO_LIMITS
    schedule: ScheduledRun | None = None  # a job's or heartbeat's run (trigger `schedule`)


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


async def run_turn(
    conv: Conversation,
    event: InboundEvent,
    options: TurnOptions = TurnOptions(),
    *,
    parent_run_id: str | None = None,
    resume: tuple[TurnProgress, Decision] | None = None,
    also: Sequence[InboundEvent] = (),
) -> TurnResult:
    """A message turn. `options.sink` hears the reply as it is written; `options.instructions` are
    appended to the system prompt of this turn only (an API client's own system messages);
    `options.can_ask` False: a call that needs a person's approval is refused (nobody could be
    asked). With `resume`, a paused run goes on from its progress: the call that waited is answered
    with the decision, then the run continues as any turn. `also`: messages collected after `event`
    (busy: collect), each stored as sent and answered by this one turn."""
    if event.channel == SUBAGENT_CHANNEL:
        options = replace(options, can_ask=False)  # a sub-agent call has no person to ask
    if resume is not None:
        progress, decision = resume
        progress.run.thread_id = conv.thread.id
        return await _drive(conv, progress, decision, options)
    run = RunRecord(
        id=uuid.uuid4().hex,
        conversation_key=event.conversation_key,
        trigger="message" if options.schedule is None else "schedule",
        model=conv.spec.model.name,
        status="ok",
        started_at=time.time(),
        thread_id=conv.thread.id,
        parent_run_id=parent_run_id,
    )
    # a message's files are taken in (and stored) before the turn runs: agentd.engine.media (busy:
    # collect joins only messages without files: handling.py)
    intake = await take_media(conv, event) if event.attachments else Intake()
    said = [intake.message(event), *(Message.user(e.text, e.user_id, e.sent_at) for e in also)]
    if also:  # the model and the memory read them together
        event = replace(event, text="\n\n".join(e.text for e in (event, *also)))
    delivered = [Delivery(e.channel, e.event_id, e.conversation_key) for e in also if e.event_id is not None]
    progress = TurnProgress(event, run, said, audit=intake.audit, delivered=delivered)
    return await _drive(conv, progress, None, options, intake)


async def _drive(
    conv: Conversation,
    progress: TurnProgress,
    decision: Decision | None,
    options: TurnOptions,
    intake: Intake | None = None,
) -> TurnResult:
    state, spec = conv.agent, conv.spec
    event, run, new = progress.event, progress.run, progress.new
    current_run.set(run.id)  # every line logged from here on in this task names the run (a resumed one too)
    prompt = await _prompt(conv, event, options)
    intake = intake or Intake()
    if decision is None:
        for note in prompt.notes:
            log.info("agent %s run %s: %s", state.name, run.id, note)
    tool_specs, history = prompt.tool_specs, prompt.history
    step_sink = None if options.sink is None else StepSink(options.sink, f"agent {state.name} run {run.id}")
    fixed_chars, history_chars = prompt.fixed_chars(), prompt.history_chars
    shows = getattr(options.sink, "progress", None) is not None  # else a server's question goes another way
    on_progress = step_sink.progress if step_sink is not None and shows else None
    caller = ToolCall(
        event.conversation_key,
        run.id,
        event.user_id,
        event.sent_at,
        event.linked_user_ids,
        on_progress,
        who=event.who,
        charged_to=SERVED.get(),
    )
    files = ToolFiles(conv, caller, progress.audit, intake.blobs)
    gate = ToolGate(spec, prompt.known, caller, progress.audit, can_ask=options.can_ask, files=files)

    new_chars = sum(m.char_count() for m in new)
    reply_text = ""
    error: str | None = None
    cut_short = False
    running = state.stops.watch(event.conversation_key, run.id)  # /stop and max_run_s cancel it
    try:
        if decision is not None and decision.stop is not None:
            raise StoppedWaiting(decision.stop)  # /stop while it waited for the approval
        if progress.batch is not None:
            if decision is not None:
                await gate.settle(progress.batch, decision.status, decision.by, decision.approval)
            if (paused := await _answer_batch(conv, progress, gate, decision)) is not None:
                return paused
            new_chars += new[-1].char_count()
        chain = ModelChain(conv, run, progress, step_sink)
        guard = OverflowGuard(conv, run, progress.audit)
        while True:
            allow_tools = progress.steps < spec.max_tool_steps
            request = CompletionRequest(
                model=spec.model.name,
                system=prompt.system,
                messages=history.extended(new),
                tools=tool_specs if allow_tools else (),
                temperature=spec.model.temperature,
                max_output_tokens=_lower(spec.model.max_output_tokens, options.limits.max_output_tokens),
                stop=options.limits.stop,
                hints=prompt.hints,
                # the images (and audio) it shows: the person's and the tools' of the last turns
                media=await images_for(conv, history.extended(new), intake.blobs),
            )
            if guard.over(request):
                guard.check_new(prompt.system, new)
                if await guard.recover("window", request):
                    prompt = await _prompt(conv, event, options)
                    history, history_chars, fixed_chars = (
                        prompt.history,
                        prompt.history_chars,
                        prompt.fixed_chars(),
                    )
                    continue
                if (shorter := guard.left_out("window", request, history)) is not None:
                    history, history_chars = shorter, sum(m.char_count() for m in shorter)
                    continue
            try:
                completion = await chain.call(request)
            except ProviderError as e:
                if e.reason != CONTEXT_OVERFLOW:
                    raise
                guard.learn(e)
                guard.check_new(prompt.system, new)
                if not await guard.recover("overflow", request, str(e)):
                    if (shorter := guard.left_out("overflow", request, history, str(e))) is None:
                        raise
                    history, history_chars = shorter, sum(m.char_count() for m in shorter)
                    continue
                prompt = await _prompt(conv, event, options)
                history, history_chars, fixed_chars = (
                    prompt.history,
                    prompt.history_chars,
                    prompt.fixed_chars(),
                )
                continue
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
                # OpenAI's and the offline model's "length", Anthropic's "max_tokens"
                cut_short = completion.stop_reason in ("length", "max_tokens")
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
            progress.batch = ToolBatch(list(calls))
            if (paused := await _answer_batch(conv, progress, gate, decision)) is not None:
                return paused
            new_chars += new[-1].char_count()
    except (ProviderError, OperatorError) as e:
        run.status, run.error = "error", str(e)
        error = "provider_error"
        # only a kept transcript holds the message: a stateless call keeps nothing to retry from
        kept = "Your message is saved" if conv.memory.keeps_transcript else "Nothing was kept"
        shown = step_sink.shown if step_sink is not None and step_sink.showing else ""
        if shown:
            # Part of the reply reached the person: it stays on their screen (no restart), no other
            # model starts over, and the failure is said after it. It is not stored as an answer (the
            # next turn must not read half a reply as the model's own), the run says how much was shown.
            run.error += f" (after {len(shown)} characters of the reply were shown)"
            reply_text = (
                f"{shown}\n\n(The answer broke off here: I could not reach the model to finish it ({e})."
                f" {kept}; please ask again.)"
            )
        else:
            if step_sink is not None:
                step_sink.restart()
            reply_text = f"Sorry, I could not reach the model just now ({e}). {kept}; please try again."
        log.warning("agent %s run %s failed: %s", state.name, run.id, e)
    except BudgetExceeded as e:
        # said once per budget and period: the messages after it are stored, not answered again
        run.status, run.error, error = "error", str(e), "budget"
        reply_text = e.reply if e.first else ""
        if step_sink is not None:
            step_sink.restart()
        if e.first:
            progress.audit.append(
                AuditRecord("budget", "refused", event.conversation_key, run.id, e.audit_data())
            )
        log.info("agent %s run %s: %s", state.name, run.id, e)
    except (asyncio.CancelledError, StoppedWaiting) as e:
        if (stop := e.stop if isinstance(e, StoppedWaiting) else running.caught()) is None:
            raise  # not a stop: the daemon is shutting down
        reply_text, error = stopped_turn(progress, step_sink, stop), "stopped"
        log.info("agent %s run %s stopped (%s)", state.name, run.id, stop.reason)
    except MessageTooLarge as e:
        # told plainly; the message is stored with the run (the next turn compacts it away)
        run.status, run.error, error = "error", str(e), "too_large"
        if step_sink is not None:
            step_sink.restart()
        reply_text = str(e)
        log.warning("agent %s run %s: %s", state.name, run.id, e)
    schedule = options.schedule
    quiet = schedule is not None and schedule.quiet_when_empty and error is None and not reply_text.strip()
    if not reply_text and error is None and not quiet:
        reply_text = "(the model returned an empty reply)"
    running.committing()
    run.duration_ms = (time.time() - run.started_at) * 1000
    closing = decision.approval if decision is not None else None
    extra = schedule.writes("" if quiet else reply_text, run) if schedule is not None else ()
    await _commit(conv, progress, closing, extra, keep=not quiet)
    reply = Reply(
        text=intake.said_first(reply_text),  # what became of their files first (refused, not understood)
        conversation_key=event.conversation_key,
        run_id=run.id,
        error=error,
        cut_short=cut_short,
        files=await reply_files(conv, new, intake.blobs) if error is None else (),  # what its tools made
    )
    return TurnResult(reply)


async def _prompt(conv: Conversation, event: InboundEvent, options: TurnOptions) -> Prompt:
    """The turn's prompt as the memory gives it now (again after a compaction)."""
    prompt = await build_prompt(
        conv,
        TurnInput(event.conversation_key, event.text, event.user_id, event.sent_at, event.linked_user_ids),
    )
    if options.instructions:
        prompt = replace(prompt, system=build_system(prompt.system, [options.instructions]))
    return prompt


async def _answer_batch(
    conv: Conversation, progress: TurnProgress, gate: ToolGate, decision: Decision | None
) -> TurnResult | None:
    """Answer the batch's calls: the pause when one needs a person, else its results join the run."""
    assert progress.batch is not None
    needed = await gate.answer(progress.batch)
    if needed is not None:
        return await pause_run(conv, progress, needed, gate, decision)
    progress.new.append(progress.batch.message())
    progress.batch, progress.steps = None, progress.steps + 1
    return None


async def _commit(
    conv: Conversation,
    progress: TurnProgress,
    closing: str | None,
    extra: Sequence[Write[Any]] = (),
    *,
    keep: bool = True,
) -> None:
    """The run's one commit: its messages, the run row, its audit rows, the delivery id; then the
    hot thread. `closing`: the approval this run was resumed from, whose saved state goes; `extra`: what
    a scheduled run writes with it (its fire, its delivery); `keep` False: no messages (a silent heartbeat)."""
    thread, event, run, new, audit = conv.thread, progress.event, progress.run, progress.new, progress.audit
    keep = keep and conv.memory.keeps_transcript
    # transcripts.redact_secrets: the stored copy (which later turns replay) has secrets redacted;
    # the model of this turn saw them as sent
    redact = keep and conv.spec.transcripts.redact_secrets
    kept, audits = transcript_copy(new, event.conversation_key, run.id) if redact else (new, [])
    stored = [StoredMessage(thread.next_seq + i, m, run.id) for i, m in enumerate(kept)] if keep else []
    usage = (run.last_input_tokens, run.tokens_estimated) if run.model_calls else None
    delivery = (
        Delivery(event.channel, event.event_id, event.conversation_key)
        if event.event_id is not None
        else None
    )
    now = time.time()
    ops: list[Write[Any]] = [CommitTurn(event.conversation_key, thread.id, stored, run, usage, delivery, now)]
    ops += [RecordDelivery(d, run.id, now) for d in progress.delivered]  # busy: collect's others
    if audit or audits:
        ops.append(AppendAudit(conv.agent.name, [*audit, *audits], now))
    if closing is not None:
        ops.append(CloseApproval(closing))  # the paused run is done: its saved state goes
    ops.extend(extra)
    [thread_id, *_] = await conv.agent.store.write(*ops)
    audit.clear()
    run.thread_id = thread_id
    # Only now, with everything committed, does the hot thread change.
    if keep:
        thread.id = thread_id
        thread.append(stored)
        if usage is not None:
            thread.last_input_tokens, thread.last_tokens_estimated = usage
