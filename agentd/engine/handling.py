"""Handling one event: de-duplication, per-conversation order, the command or turn, after-run work.

Events of a conversation run one at a time, in arrival order (a FIFO lock per
conversation key, then the store's claim on it: a lease when several daemons
share the store); different conversations run concurrently. After-run memory
work that is due runs before the next event of the conversation loads its
history: in the background right after the reply, and again at the start of
the next event if it did not finish (say, after a restart).

A run paused for a person's approval keeps its conversation (see
agentd.engine.approvals): `/approve` and `/deny` are answered out of band, and
so is `/status` while the conversation waits, so neither queues behind it.
`/stop` is always answered out of band: it stops the turn the conversation is
running (agentd.engine.stopping). With `busy: collect`, the messages that
arrive while a turn runs are answered together by the next (agentd.engine.collecting).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from agentd.config.models import AgentSpec
from agentd.engine.approval_commands import answer_approval, is_approval_command
from agentd.engine.approvals import Approvals
from agentd.engine.collecting import Collected, Collecting
from agentd.engine.commands import command_name, is_command, run_command
from agentd.engine.conversation import Conversation
from agentd.engine.elicitations import Elicitations, is_elicitation_command
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.mcp_sampling import McpSampling
from agentd.engine.metering import serve
from agentd.engine.pausing import TurnResult
from agentd.engine.progress import Decision, TurnProgress
from agentd.engine.rate_limits import audit_rows
from agentd.engine.state import RECENT_EVENTS, AgentState
from agentd.engine.subagents import CHANNEL as SUBAGENT_CHANNEL
from agentd.engine.turn import TurnOptions, run_turn
from agentd.errors import ModelPaused, StoreError
from agentd.events import InboundEvent, Reply
from agentd.memory.base import Memory
from agentd.store.queries import DeliverySeen
from agentd.store.records import ApprovalRecord, StoredThread

log = logging.getLogger(__name__)
RESUME_WAIT_S = 10.0  # the most a resumed run waits for the agent's MCP servers to connect


class EventHandler:
    def __init__(self, state: AgentState, lifecycle: Lifecycle):
        self._state = state
        self._lifecycle = lifecycle
        self._waiting: set[str] = set()  # conversations with after-run work queued beside them
        self._collecting = Collecting()  # busy: collect — messages waiting to be answered together
        self.approvals = Approvals(state, lifecycle, self._resume)
        state.stops.end_paused = self.approvals.end_for_stop  # /stop ends a run paused for an approval too
        # what the agent's MCP servers may ask of it: the person's input, and its model
        self.elicitations = Elicitations(state)
        state.tool_servers.elicitor = self.elicitations
        state.tool_servers.sampler = McpSampling(state)

    async def handle(self, event: InboundEvent, options: TurnOptions, parent_run_id: str | None) -> Reply:
        """Answer one event with the current definition; a platform redelivery is answered once.
        `options.sink` hears the reply as it is written (a command's reply comes at once, in the Reply)."""
        spec = self._state.spec  # read once: a reload mid-run does not change this run
        try:
            if event.event_id is not None and await self._is_duplicate(event):
                return Reply(text="", conversation_key=event.conversation_key, duplicate=True)
            if event.channel != SUBAGENT_CHANNEL:  # a sub-agent call is charged to whom its parent serves
                serve(event)
                if (refused := await self._over_rate(event)) is not None:
                    return refused
            if is_approval_command(event.text):
                return await answer_approval(self.approvals, event)
            if is_elicitation_command(event.text):  # like an approval: never behind the waiting run
                return await self.elicitations.answer(event)
            name = command_name(event.text)
            if name == "stop" or (name == "status" and self.approvals.pending_in(event.conversation_key)):
                return await self._command_now(event, spec)  # /stop overtakes the turn it stops
            collectable = name is None and not event.attachments  # a message with files has a turn of its own
            if spec.busy == "collect" and collectable and self._state.locks.held(event.conversation_key):
                return await self._collect(event, spec, options, parent_run_id)
            return await self._run(event, spec, options, parent_run_id)
        except BaseException:
            # not answered (say, its file could not be opened): a redelivery must be answered
            if event.event_id is not None:
                self._state.recent_events.pop((event.channel, event.event_id), None)
            raise

    async def _over_rate(self, event: InboundEvent) -> Reply | None:
        """The reply to an event over a rate limit (not queued: dropped), else None (it goes on)."""
        limiter = self._state.resources.rate_limiter
        if limiter is None:
            return None
        limited, ended = await limiter.admit(self._state.name, event)
        if limited is not None and limited.audit is not None:
            ended.append(limited.audit)
        await audit_rows(self._state.store, self._state.name, ended, limiter.clock.time())
        return None if limited is None else Reply(text=limited.reply, conversation_key=event.conversation_key)

    def held_by(self, event: InboundEvent) -> str | None:
        """The approval `event` would wait behind (its conversation is held by a paused run), None when
        it would be answered in its turn: /approve, /deny, /status and /stop never wait."""
        waiting = self.approvals.pending_in(event.conversation_key)
        if not waiting or is_approval_command(event.text) or command_name(event.text) in ("status", "stop"):
            return None
        return waiting[0].id

    async def _collect(
        self, event: InboundEvent, spec: AgentSpec, options: TurnOptions, parent_run_id: str | None
    ) -> Reply:
        """busy: collect — a message that arrives while its conversation's turn runs joins the next
        turn: the first such message leads (runs the turn), the rest get its reply."""
        batch = self._collecting.join(event)
        if batch.events[0] is not event:
            return replace(await asyncio.shield(batch.reply), joined=True)
        try:
            reply = await self._run(event, spec, options, parent_run_id, batch)
        except BaseException as e:
            batch.fail(e)
            raise
        batch.reply.set_result(reply)
        return reply

    async def _run(
        self,
        event: InboundEvent,
        spec: AgentSpec,
        options: TurnOptions,
        parent_run_id: str | None,
        batch: Collected | None = None,
    ) -> Reply:
        state, key = self._state, event.conversation_key
        with self._lifecycle.busy():
            release = await self._take(key)
            # the messages collected while the turn before ran: from here on, new ones wait for the next
            also = self._collecting.close(key, batch)
            paused = False
            try:
                async with state.store.claim(key, known=state.threads.known(key)) as claim:
                    if state.store.shared and event.event_id is not None:
                        # another daemon may have answered this delivery while we waited for the claim
                        if await state.store.read(DeliverySeen(event.channel, event.event_id)):
                            return Reply(text="", conversation_key=key, duplicate=True)
                    conv = await Conversation.open(state, key, claim, spec=spec)
                    memory, thread = conv.memory, conv.thread
                    if memory.settle_due(thread):
                        if memory.settles_first:
                            await self._settle(memory, thread, None)
                        else:
                            self._after_run(key, memory, None)  # left over (a restart, a paused model)
                    if is_command(event.text):
                        reply = await run_command(conv, event)
                        if event.attachments:  # a command takes no files: said, never dropped unsaid
                            note = (
                                "(The files were not taken: a command takes none; send them with a message.)"
                            )
                            reply = replace(reply, text=f"{reply.text}\n{note}")
                    else:
                        with state.stops.running(key, spec.max_run_s):
                            result = await run_turn(
                                conv, event, options, parent_run_id=parent_run_id, also=also
                            )
                        reply = result.reply
                        if reply.error == "stopped":
                            state.threads.forget(key)  # a stop may have cut a compaction short: read it again
                        if result.paused is not None:
                            # the paused run keeps the conversation until a person decides
                            self.approvals.hold(result.paused, release)
                            paused = True
                    await state.trim(key, memory)
            finally:
                if not paused:
                    release()
            if not paused and not is_command(event.text) and memory.settle_due(thread):
                self._after_run(key, memory, reply.run_id)
            return reply

    async def _take(self, key: str) -> Callable[[], None]:
        """The conversation's place in order; waiting behind a paused run is not work in flight."""
        if self.approvals.pending_in(key):
            with self._lifecycle.parked():
                release = await self._state.locks.acquire(key)
        else:
            release = await self._state.locks.acquire(key)
        if self._lifecycle.status == "stopped":
            release()
            raise StoreError(f"agent {self._state.name} stopped while this message waited; send it again")
        return release

    async def _resume(self, record: ApprovalRecord, decision: Decision) -> TurnResult:
        """Go on with a paused run (its conversation is held by the approval that waited)."""
        state, spec, key = self._state, self._state.spec, record.conversation_key
        assert record.state is not None
        progress = TurnProgress.from_state(record.state)
        # after a restart the MCP servers may still be connecting: an approved call needs its tool
        await state.tool_servers.wait_ready(RESUME_WAIT_S)
        async with state.store.claim(key, known=state.threads.known(key)) as claim:
            conv = await Conversation.open(state, key, claim, spec=spec)
            with state.stops.running(key, spec.max_run_s):
                result = await run_turn(conv, progress.event, resume=(progress, decision))
            await state.trim(key, conv.memory)
        if result.paused is None and conv.memory.settle_due(conv.thread):
            self._after_run(key, conv.memory, result.reply.run_id)
        return result

    async def _command_now(self, event: InboundEvent, spec: AgentSpec) -> Reply:
        """A command answered at once, not in order: /stop (it stops the turn the conversation is
        running), /status while the conversation waits for an approval."""
        conv = await Conversation.open(self._state, event.conversation_key, spec=spec)
        return await run_command(conv, event)

    async def _is_duplicate(self, event: InboundEvent) -> bool:
        assert event.event_id is not None
        marker = (event.channel, event.event_id)
        recent = self._state.recent_events
        if marker in recent:
            return True
        recent[marker] = None  # claims it now, so a concurrent redelivery is a duplicate
        while len(recent) > RECENT_EVENTS:
            recent.popitem(last=False)
        return await self._state.store.read(DeliverySeen(*marker))

    async def _settle(self, memory: Memory, thread: StoredThread, run_id: str | None) -> None:
        """Run the due after-run work once (the caller holds the right lock); a paused model's work is
        queued again for when the pause ends."""
        assert memory.after_run is not None
        try:
            await memory.after_run.settle(self._state.context, thread, run_id)
        except ModelPaused as paused:
            self._after_run(thread.conversation_key, memory, None, paused.retry_in)
        except Exception:
            # After-run work is derived from persisted cursors: whatever failed is retried next time.
            log.exception(
                "agent %s: memory work after a run of %s failed", self._state.name, thread.conversation_key
            )

    def _after_run(self, key: str, memory: Memory, run_id: str | None, delay: float = 0.0) -> None:
        """Queue the conversation's after-run work (once: a queued job does all that is due then);
        with a delay (a paused model), queue it when the delay is over. A delayed job is not in
        flight until then: draining never waits for a pause, and a restart redoes the work anyway."""
        if delay > 0:
            self._lifecycle.later(delay, lambda: self._after_run(key, memory, run_id))
        elif key not in self._waiting:
            self._waiting.add(key)
            self._lifecycle.spawn(self._after_run_job(key, memory, run_id))

    async def _after_run_job(self, key: str, memory: Memory, run_id: str | None) -> None:
        """After-run work in the conversation's order.

        Work that must precede the next turn (`Memory.settles_first`) takes the conversation's own
        lock, so the next message waits for it; all other work takes the conversation's memory lock
        and runs beside the turns, which never wait for it.
        """
        state = self._state
        first = memory.settles_first
        locks, purpose = (state.locks, "turn") if first else (state.memory_locks, "memory")
        async with locks.hold(key):
            # From here on, new work queues a job behind this one: this one reads the thread only
            # once it has the store's claim too (a round trip on a shared store), and work that
            # comes meanwhile may be past what it reads.
            self._waiting.discard(key)
            async with state.store.claim(key, purpose, state.threads.known(key)) as claim:
                if state.store.shared:
                    thread: StoredThread | None = await state.thread(key, memory, claim)
                else:
                    thread = state.threads.peek(key) if memory.keeps_transcript else None
                if thread is not None and memory.settle_due(thread):
                    await self._settle(memory, thread, run_id)
                    await self._state.trim(key, memory)
