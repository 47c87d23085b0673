"""One agent at run time: its spec, its SQLite file, its conversations, and `handle(event)`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.conversations import ConversationLocks, HotThreads
from agentd.events import InboundEvent, Reply
from agentd.memory.base import MemoryStrategy
from agentd.memory.compaction import CompactionOutcome, compact_thread
from agentd.memory.persistent import PersistentMemory
from agentd.memory.transcript import FullTranscript, NoHistory
from agentd.providers.base import ModelProvider
from agentd.providers.registry import ProviderRegistry
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.db import AgentStore
from agentd.store.identity import ensure_identity
from agentd.store.inbound import event_seen
from agentd.store.transcripts import StoredThread

log = logging.getLogger(__name__)
RECENT_EVENTS = 10_000


def strategy_for(spec: AgentSpec) -> MemoryStrategy:
    if spec.memory.scope == "thread":
        threshold = spec.memory.compact_at_tokens
        return FullTranscript(compact_at_tokens=threshold if threshold is not False else None)
    return NoHistory()


class AgentRuntime:
    """Everything one agent needs to answer events. `spec` may be swapped by a hot reload;
    a turn reads it once at its start, so in-flight runs finish on the definition they began with."""

    def __init__(
        self,
        spec: AgentSpec,
        store: AgentStore,
        providers: ProviderRegistry,
        *,
        hot_conversations: int = 2000,
    ):
        self.spec = spec
        self.store = store
        self.providers = providers
        self.locks = ConversationLocks()
        self.threads = HotThreads(store, hot_conversations)
        self.memory = PersistentMemory(store, spec.name, spec.memory.max_value_chars)
        self.status = "starting"
        self.last_error: str | None = None
        self.started_at = time.time()
        self._recent_events: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._background: set[asyncio.Task[Any]] = set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def name(self) -> str:
        return self.spec.name

    async def start(self) -> None:
        await self.store.open()
        await self.store.write(
            lambda conn: ensure_identity(conn, {"agent": self.name, "created_at": str(time.time())})
        )
        await self.memory.load()
        self.status = "running"

    def update_spec(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.memory.max_value_chars = spec.memory.max_value_chars

    # -- the entry point ---------------------------------------------------------------

    async def handle(self, event: InboundEvent) -> Reply:
        """Answer one event: ordered per conversation, de-duplicated by platform id."""
        from agentd.engine.commands import is_command, run_command
        from agentd.engine.turn import run_turn

        if event.event_id is not None and await self._is_duplicate(event):
            return Reply(text="", conversation_key=event.conversation_key, duplicate=True)
        self._enter()
        try:
            spec = self.spec
            strategy = strategy_for(spec)
            async with self.locks.hold(event.conversation_key):
                thread = await self._thread(event.conversation_key, strategy)
                if strategy.needs_compaction(thread):
                    await self.compact(spec, thread, reason="threshold")
                if is_command(event.text):
                    return await run_command(self, spec, strategy, thread, event)
                reply = await run_turn(self, spec, strategy, thread, event)
            if strategy.needs_compaction(thread):
                self._spawn(self._compact_later(event.conversation_key))
            return reply
        finally:
            self._leave()

    async def _thread(self, key: str, strategy: MemoryStrategy) -> StoredThread:
        if not strategy.keeps_transcript:
            return StoredThread(key)
        return await self.threads.get(key)

    async def _is_duplicate(self, event: InboundEvent) -> bool:
        assert event.event_id is not None
        marker = (event.channel, event.event_id)
        if marker in self._recent_events:
            return True
        self._recent_events[marker] = None  # claims it now, so a concurrent redelivery is a duplicate
        while len(self._recent_events) > RECENT_EVENTS:
            self._recent_events.popitem(last=False)
        return await self.store.read(lambda conn: event_seen(conn, marker[0], marker[1]))

    # -- compaction ----------------------------------------------------------------------

    def model_for(self, spec: AgentSpec, small: bool) -> tuple[ModelProvider, str, str]:
        ref = (spec.model.small or spec.model.name) if small else spec.model.name
        provider, model = self.providers.resolve(ref)
        return provider, model, ref

    async def compact(self, spec: AgentSpec, thread: StoredThread, reason: str) -> CompactionOutcome:
        """Compact a thread; the caller holds its conversation lock."""
        provider, model, ref = self.model_for(spec, small=True)
        outcome = await compact_thread(
            store=self.store,
            agent=self.name,
            thread=thread,
            provider=provider,
            model_ref=ref,
            model_name=model,
            reason=reason,
        )
        if outcome.status == "failed":
            log.warning(
                "agent %s: compaction of %s failed: %s", self.name, thread.conversation_key, outcome.error
            )
        return outcome

    async def _compact_later(self, key: str) -> None:
        """After a run crossed the threshold: compact before the next message loads its history."""
        self._enter()
        try:
            spec = self.spec
            strategy = strategy_for(spec)
            async with self.locks.hold(key):
                thread = self.threads.peek(key)
                if thread is not None and strategy.needs_compaction(thread):
                    await self.compact(spec, thread, reason="threshold")
        except Exception:
            log.exception("agent %s: background compaction of %s failed", self.name, key)
        finally:
            self._leave()

    # -- audit, lifecycle -------------------------------------------------------------

    async def audit(
        self,
        kind: str,
        action: str,
        *,
        conversation_key: str | None = None,
        run_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        record = AuditRecord(kind, action, conversation_key, run_id, data or {})
        now = time.time()
        await self.store.write(lambda conn: insert_audit(conn, self.name, [record], now))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait for in-flight runs (and their after-run work) to finish; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.status = "stopped"
        await self.store.close()
