"""One running agent: what the daemon, the HTTP API, the channels' host and the CLI may ask of it.

Inside, the parts are separate: the state (`state.py`), the memory context
given to strategies (`context.py`), the handling of an event (`handling.py`),
the prompt (`prompt.py`), the status facts (`status.py`) and the lifecycle
(`lifecycle.py`). Build one with `agentd.daemon.resources.Resources.open_agent`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.agent_reads import AgentReads
from agentd.engine.approvals import OPERATOR, Outcome, describe_pending
from agentd.engine.context import AgentContext
from agentd.engine.conversation import Conversation
from agentd.engine.deletions import delete_conversation, forget_memory
from agentd.engine.elicitations import HttpAnswer
from agentd.engine.handling import EventHandler
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.people import audit_merged_memories, erase_person, person_data
from agentd.engine.resources import AgentResources
from agentd.engine.scheduled import ScheduledRun
from agentd.engine.state import AgentState
from agentd.engine.stateless import run_stateless
from agentd.engine.status import status_facts, tools_report
from agentd.engine.stop_anywhere import Stopped, stop_anywhere, stop_here
from agentd.engine.stop_request import BY_API, Stop
from agentd.engine.turn import NO_LIMITS, TurnLimits, TurnOptions
from agentd.errors import NewerSchema, StoreError
from agentd.events import InboundEvent, Reply, ReplySink
from agentd.memory.episode_writes import forget_partition
from agentd.messages import Message
from agentd.store.base import KnowsIfAbsent, Store
from agentd.store.queries import (
    AuditEvents,
)
from agentd.store.records import Linked
from agentd.store.writes import EnsureIdentity
from agentd.tools.mcp_servers import McpServers


class Agent(AgentReads):
    def __init__(
        self, spec: AgentSpec, store: Store, resources: AgentResources, tool_servers: McpServers | None = None
    ):
        # `state` is open to the engine's own parts and to tests; everything else uses the methods.
        self.state = AgentState(spec, store, resources, tool_servers)
        self.lifecycle = Lifecycle()
        self._handler = EventHandler(self.state, self.lifecycle)
        self._readonly = False
        self._data = "unopened"  # unopened | ready | failed: see `ready`
        self._opening: asyncio.Lock | None = None  # only while the first use is under way

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def status(self) -> str:
        return self.lifecycle.status

    @property
    def context(self) -> AgentContext:
        """The memory context the agent's strategies get (built once with its state)."""
        return self.state.context

    @property
    def store_label(self) -> str:
        return self.state.store.label

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self, *, readonly: bool = False) -> None:
        """Ready the agent; `readonly` writes nothing (the CLI beside a running daemon).

        Nothing of the agent's data is read here: that waits for its first use
        (`ready`), so a daemon with thousands of agents starts without touching
        their files, and an idle agent holds none.
        """
        self._readonly = readonly
        await self.state.store.open()
        if not readonly:
            await self.state.tool_servers.apply(self.spec.tools)
            if self.spec.tools.ask:
                # an agent that asks people may have runs waiting: they expire on time, and are listed,
                # without waiting for the agent's next message
                await self.ready()
        self.lifecycle.status = "running"

    @property
    def data_state(self) -> str:
        """unopened (not used since start: its data is opened at first use), ready, or failed."""
        return self._data

    async def ready(self) -> None:
        """At the first use since start: open the data (migrating it), record the file's identity and
        load what the agent keeps in memory (its persistent-memory keys).

        Raises StoreError when the data cannot be opened: the call that needed it
        fails, and the next one tries again. Data written by a newer agentd
        (NewerSchema) fails the agent itself: it shows `error` with the reason.
        """
        if self._data == "ready":
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._data == "ready":
                return
            try:
                if not self._readonly:
                    await self.state.store.write(
                        EnsureIdentity({"agent": self.name, "created_at": str(time.time())})
                    )
                await self.state.persistent.load()
                if not self._readonly:
                    # runs paused for an approval take their conversations back before any message can
                    await self._handler.approvals.recover()
            except NewerSchema as e:
                await self._failed(e)
                raise
            self._data = "ready"
        self._opening = None

    async def _failed(self, error: NewerSchema) -> None:
        self._data = "failed"
        await self.lifecycle.fail(str(error))

    def _nothing_to_read(self, *, because_failed: bool = False) -> bool:
        """Whether a background read (the daemon-wide audit trail, retention) should skip this agent:
        its data failed, or it was never written (reading would create its file). With
        `because_failed`, data that failed is an error (StoreError) instead: a person's data must not
        be reported absent when it only could not be read."""
        store = self.state.store
        if self._data == "failed":
            if because_failed:
                raise StoreError(f"agent {self.name}'s data cannot be used: {self.lifecycle.last_error}")
            return True
        return self._data == "unopened" and isinstance(store, KnowsIfAbsent) and store.absent()

    async def close(self) -> None:
        self.lifecycle.status = "stopped"
        self.state.threads.close()
        self.lifecycle.cancel_later()  # work waiting for a paused model is redone after a restart
        await self._handler.approvals.close()  # open approvals wait again after a restart
        await self.state.tool_servers.stop()
        await self.state.store.close()

    def update_spec(self, spec: AgentSpec) -> None:
        """A hot reload: runs already going finish on the definition they began with.

        An agent that failed on its data tries again at its next use (as a start would)."""
        self.state.update_spec(spec)
        if self._data == "failed":
            self._data, self.lifecycle.status, self.lifecycle.last_error = "unopened", "running", None

    async def reload(self, spec: AgentSpec) -> None:
        """A hot reload that also restarts the MCP servers whose definition changed."""
        self.update_spec(spec)
        await self.state.tool_servers.apply(spec.tools)

    @property
    def in_flight(self) -> int:
        return self.lifecycle.in_flight

    @property
    def conversations_waiting(self) -> int:
        """Conversations with messages queued behind the one being answered."""
        return self.state.locks.conversations_waiting()

    async def drain(self, timeout: float | None = None) -> bool:
        return await self.lifecycle.drain(timeout)

    # -- the one entry point ---------------------------------------------------------------

    async def handle(
        self,
        event: InboundEvent,
        parent_run_id: str | None = None,
        *,
        sink: ReplySink | None = None,
        instructions: str = "",
        limits: TurnLimits = NO_LIMITS,
    ) -> Reply:
        """Answer one event in its conversation. `sink` hears the reply as the model writes it;
        `instructions` are added to the system prompt of this turn only (never stored); `limits`: a
        caller's stop sequences and output tokens for this turn."""
        await self.ready()
        event = await self.state.resources.people.resolve(event)  # the person behind a linked account
        return await self._handler.handle(
            event, TurnOptions(sink, instructions, limits=limits), parent_run_id
        )

    def held_by(self, event: InboundEvent) -> str | None:
        """The id of the approval `event` would wait behind, None when it would not wait for one."""
        return self._handler.held_by(event)

    async def stop_run(self, conversation_key: str, by: str) -> Stopped | None:
        """Stop the conversation's run, as /stop does (audited): its turn running here or on another
        daemon sharing the store, or its wait for an approval; None when nothing was stopped."""
        await self.ready()
        return await stop_anywhere(self.state, conversation_key, Stop(BY_API, by=by))

    async def stop_asked(self, conversation_key: str, stop: Stop) -> str | None:
        """A stop another daemon asked of this one (agentd.daemon.stop_relay): the run stopped here."""
        stopped = await stop_here(self.state, conversation_key, stop)
        return None if stopped is None else stopped.run_id

    async def handle_scheduled(self, event: InboundEvent, scheduled: ScheduledRun) -> Reply:
        """Run a job's task or a heartbeat in its conversation, in order with its messages; what the
        fire writes is committed with the run (see agentd.engine.job_fire). Nobody can be asked to
        approve a call: a call that would ask is refused."""
        await self.ready()
        return await self._handler.handle(event, TurnOptions(can_ask=False, schedule=scheduled), None)

    async def answer_stateless(
        self,
        event: InboundEvent,
        earlier: Sequence[Message],
        *,
        sink: ReplySink | None = None,
        instructions: str = "",
        limits: TurnLimits = NO_LIMITS,
    ) -> Reply:
        """Answer `event` after `earlier`, the whole conversation as the caller sent it: no thread is
        read or written, only the run is recorded (see stateless.py)."""
        await self.ready()
        event = await self.state.resources.people.resolve(event)
        options = TurnOptions(sink, instructions, limits=limits)
        return await run_stateless(self.state, self.lifecycle, event, earlier, options)

    # -- tools and approvals --------------------------------------------------------------------

    async def start_tool_servers(self, wait_s: float = 0.0) -> None:
        """Start the MCP servers of the definition (open() does); wait up to `wait_s` for them to connect."""
        await self.state.tool_servers.apply(self.spec.tools)
        await self.state.tool_servers.wait_ready(wait_s)

    async def stop_tool_servers(self) -> None:
        await self.state.tool_servers.stop()

    def tools_report(self) -> dict[str, Any]:
        """Every tool with its source and the policy's decision, and the MCP servers' state."""
        return tools_report(self.state)

    async def approvals(self) -> list[dict[str, Any]]:
        """Approvals waiting for a person, oldest first."""
        await self.ready()
        now = time.time()
        records = sorted(self.state.waiting_approvals.values(), key=lambda r: r.created_at)
        return [describe_pending(r, now) for r in records]

    async def decide_approval(self, approval_id: str, approve: bool, approver: str = OPERATOR) -> Outcome:
        """Answer an approval through the API (the operator); waits for the resumed run."""
        await self.ready()
        return await self._handler.approvals.decide(approval_id, approve, approver)

    async def questions(self) -> list[dict[str, Any]]:
        """Tool servers' questions waiting for an answer (agentd.engine.elicitations), oldest first."""
        await self.ready()
        return self._handler.elicitations.listing()

    async def answer_question(self, question_id: str, action: str, content: Any) -> HttpAnswer:
        """Answer a waiting question through the API (the operator, as for approvals)."""
        await self.ready()
        return self._handler.elicitations.answer_http(question_id, action, content)

    async def status_of(self, conversation_key: str, user_id: str | None = None) -> dict[str, Any]:
        await self.ready()
        conv = await Conversation.open(self.state, conversation_key)
        facts = await status_facts(conv)
        spec = conv.spec
        if spec.memory.persistent:
            # the keys that conversation's model sees: with persistent_scope user, only that person's
            facts["memory_keys"] = self.state.memory_keys(spec, conversation_key, user_id)
        return facts

    async def audit_events(
        self, kind: str | None = None, since: float | None = None, limit: int = 100, tool: str | None = None
    ) -> list[dict[str, Any]]:
        """The agent's audit events. Read for the daemon-wide trail too, so without `ready`: reading
        needs no identity row or memory keys, and never creates a file that was never written."""
        if self._nothing_to_read():
            return []
        try:
            return await self.state.store.read(AuditEvents(self.name, kind, since, limit, tool))
        except NewerSchema as e:
            await self._failed(e)
            return []

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        run_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        await self.context.audit(kind, action, conversation_key=conversation_key, run_id=run_id, data=data)

    async def forget_episodes(self, user_id: str, by: str) -> int:
        """Delete every episode of one person (a data-subject request), audited with the count and who
        asked; returns how many. Runs in flight finish first, so none stores an exchange afterwards."""
        await self.drain(30)
        return await forget_partition(self.state.store, self.name, f"user:{user_id}", time.time(), by)

    async def person_data(self, user_id: str) -> dict[str, Any] | None:
        """Everything this agent holds about one person (agentd.store.queries.PersonData); None when the
        agent never stored anything (nothing is created to find that out)."""
        if self._nothing_to_read(because_failed=True):
            return None
        await self.ready()
        return await person_data(self.state, user_id)

    async def audit_merged_memories(self, linked: Linked) -> list[str]:
        """After accounts were linked: audit the persistent keys more than one of them held (the newer
        value is the person's now); returns those keys."""
        if self._nothing_to_read():
            return []
        await self.ready()
        return await audit_merged_memories(self.state, linked)

    async def erase_person(self, user_id: str, subject: Mapping[str, Any], by: str) -> dict[str, int]:
        """Erase one person from this agent, hot copies included (agentd.engine.people); the counts of
        what went, per kind (empty: it held nothing of theirs)."""
        if self._nothing_to_read(because_failed=True):
            return {}
        await self.ready()
        with self.lifecycle.busy():
            return await erase_person(self.state, self._handler.approvals, user_id, subject, by)

    async def delete_conversation(self, conversation_key: str, by: str) -> dict[str, int]:
        """Delete the conversation's threads (archived ones too), audited with counts and who asked."""
        await self.ready()
        with self.lifecycle.busy():
            return await delete_conversation(self.state, conversation_key, by)

    async def forget_memory(self, key: str, *, scope: str, by: str) -> None:
        """Delete one persistent memory of `scope` ("" the agent's, user:<id> a person's); ToolError when
        it is not held there."""
        await self.ready()
        await forget_memory(self.state, key, scope, by)

    async def sweep_episodes(self, now: float) -> int:
        """Retention over every stored episode (a partition nobody writes to is pruned here); for an
        idle agent too (its file is opened for it), unless nothing was ever stored."""
        if self._nothing_to_read():
            return 0
        memory = self.state.memory_of(self.spec, "")
        try:
            return await memory.sweep(self.context, now)
        except NewerSchema as e:
            await self._failed(e)
            return 0
