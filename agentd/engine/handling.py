"""Handling one event: de-duplication, per-conversation order, the command or turn, after-run work.

Events of a conversation run one at a time, in arrival order (a FIFO lock per
conversation key); different conversations run concurrently. After-run memory
work that is due runs before the next event of the conversation loads its
history: in the background right after the reply, and again at the start of
the next event if it did not finish (say, after a restart).
"""

from __future__ import annotations

import logging

from agentd.config.models import AgentSpec
from agentd.engine.commands import Invocation, is_command, run_command
from agentd.engine.context import AgentContext
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.state import RECENT_EVENTS, AgentState
from agentd.engine.turn import run_turn
from agentd.events import InboundEvent, Reply
from agentd.memory.base import Memory
from agentd.store.queries import DeliverySeen
from agentd.store.records import StoredThread

log = logging.getLogger(__name__)


class EventHandler:
    def __init__(self, state: AgentState, ctx: AgentContext, lifecycle: Lifecycle):
        self._state = state
        self._ctx = ctx
        self._lifecycle = lifecycle

    async def handle(self, event: InboundEvent, parent_run_id: str | None = None) -> Reply:
        """Answer one event with the current definition; a platform redelivery is answered once."""
        spec = self._state.spec  # read once: a reload mid-run does not change this run
        try:
            if event.event_id is not None and await self._is_duplicate(event):
                return Reply(text="", conversation_key=event.conversation_key, duplicate=True)
            return await self._run(event, spec, parent_run_id)
        except BaseException:
            # not answered (say, its file could not be opened): a redelivery must be answered
            if event.event_id is not None:
                self._state.recent_events.pop((event.channel, event.event_id), None)
            raise

    async def _run(self, event: InboundEvent, spec: AgentSpec, parent_run_id: str | None) -> Reply:
        state, key = self._state, event.conversation_key
        memory = state.memory_of(spec, key)
        with self._lifecycle.busy():
            async with state.locks.hold(key):
                thread = await state.thread(key, memory, self._ctx)
                if memory.settle_due(thread):
                    await self._settle(memory, thread, None)
                if is_command(event.text):
                    reply = await run_command(Invocation(state, self._ctx, spec, memory, thread, event))
                else:
                    reply = await run_turn(state, self._ctx, spec, memory, thread, event, parent_run_id)
                await state.trim(key, memory, self._ctx)
            if not is_command(event.text) and memory.settle_due(thread):
                self._lifecycle.spawn(self._settle_later(key, memory, reply.run_id))
            return reply

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
        assert memory.after_run is not None
        try:
            await memory.after_run.settle(self._ctx, thread, run_id)
        except Exception:
            # After-run work is derived from persisted cursors: whatever failed is retried next time.
            log.exception(
                "agent %s: memory work after a run of %s failed", self._state.name, thread.conversation_key
            )

    async def _settle_later(self, key: str, memory: Memory, run_id: str | None) -> None:
        """After a run: do the memory work before the next message of the conversation loads."""
        async with self._state.locks.hold(key):
            thread = self._state.threads.peek(key) if memory.keeps_transcript else None
            if thread is not None and memory.settle_due(thread):
                await self._settle(memory, thread, run_id)
                await self._state.trim(key, memory, self._ctx)
