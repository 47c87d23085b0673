"""One agent at run time: its spec, its SQLite file, its conversations, and `handle(event)`."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.conversations import ConversationLocks, HotThreads
from agentd.errors import OperatorError, ProviderError
from agentd.events import InboundEvent, Reply
from agentd.memory.base import MemoryStrategy, ModelCall
from agentd.memory.compaction import CompactionOutcome, compact_thread
from agentd.memory.persistent import PersistentMemory
from agentd.memory.registry import strategy_for
from agentd.memory.tooling import Tool
from agentd.messages import Message, estimate_tokens
from agentd.providers.base import CompletionRequest, Embedder, ModelProvider
from agentd.providers.registry import ProviderRegistry
from agentd.store.audit import AuditRecord, insert_audit
from agentd.store.db import AgentStore
from agentd.store.identity import ensure_identity
from agentd.store.inbound import event_seen
from agentd.store.runs import RunRecord, insert_run
from agentd.store.transcripts import StoredThread

log = logging.getLogger(__name__)
RECENT_EVENTS = 10_000


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
        embedder: Embedder | None = None,
        memory_extractor_model: str | None = None,
    ):
        self.spec = spec
        self.store = store
        self.providers = providers
        self.locks = ConversationLocks()
        self.threads = HotThreads(store, hot_conversations)
        self.memory = PersistentMemory(store, spec.name, spec.memory.max_value_chars)
        self.embedder = embedder
        self.memory_extractor_model = memory_extractor_model
        # other agents of the daemon, for sub-agent tools (set by the daemon)
        self.peers: Callable[[str], AgentRuntime | None] = lambda name: None
        self._strategies: tuple[AgentSpec, MemoryStrategy] | None = None
        self.tools_cache: tuple[AgentSpec, list[Tool]] | None = None  # see engine.turn.agent_tools
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

    @property
    def agent(self) -> str:
        return self.spec.name

    def update_spec(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.memory.max_value_chars = spec.memory.max_value_chars

    def strategy(self, spec: AgentSpec) -> MemoryStrategy:
        """The memory strategy of a definition, built once per definition."""
        cached = self._strategies
        if cached is not None and cached[0] is spec:
            return cached[1]
        strategy = strategy_for(spec)
        self._strategies = (spec, strategy)
        return strategy

    # -- the entry point ---------------------------------------------------------------

    async def handle(self, event: InboundEvent) -> Reply:
        """Answer one event: ordered per conversation, de-duplicated by platform id."""
        if event.event_id is not None and await self._is_duplicate(event):
            return Reply(text="", conversation_key=event.conversation_key, duplicate=True)
        return await self.handle_with(event, self.spec, None)

    async def handle_with(
        self,
        event: InboundEvent,
        spec: AgentSpec,
        strategy: MemoryStrategy | None,
        parent_run_id: str | None = None,
    ) -> Reply:
        """Answer with a given definition and strategy (a sub-agent slot may override the strategy)."""
        from agentd.engine.commands import is_command, run_command
        from agentd.engine.turn import run_turn

        self._enter()
        try:
            strategy = strategy or self.strategy(spec)
            async with self.locks.hold(event.conversation_key):
                thread = await self._thread(event.conversation_key, strategy)
                if strategy.settle_due(thread):
                    await self._settle(strategy, thread, None)
                if is_command(event.text):
                    return await run_command(self, spec, strategy, thread, event)
                reply = await run_turn(self, spec, strategy, thread, event, parent_run_id)
            if strategy.settle_due(thread):
                self._spawn(self._settle_later(event.conversation_key, strategy, reply.run_id))
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

    # -- memory work after runs (MemoryContext) ---------------------------------------------

    def agent_model(self, small: bool = False) -> str:
        spec = self.spec
        return (spec.model.small or spec.model.name) if small else spec.model.name

    def memory_model(self, preferred: str | None) -> str | None:
        if preferred:
            return preferred
        if self.memory_extractor_model:
            return self.memory_extractor_model
        for ref in (self.spec.model.small, self.spec.model.name):
            # the offline model cannot fold or extract: it only echoes what it was given
            if ref and not ref.startswith("offline/"):
                return ref
        return None

    def model_for(self, ref: str) -> tuple[ModelProvider, str]:
        return self.providers.resolve(ref)

    async def call_model(
        self,
        *,
        trigger: str,
        model_ref: str,
        system: str,
        messages: Sequence[Message],
        conversation_key: str | None,
        thread_id: int | None = None,
        parent_run_id: str | None = None,
        purpose: str = "chat",
    ) -> ModelCall:
        run = RunRecord(
            id=uuid.uuid4().hex,
            conversation_key=conversation_key,
            trigger=trigger,
            model=model_ref,
            status="ok",
            started_at=time.time(),
            thread_id=thread_id,
            parent_run_id=parent_run_id,
        )
        request = CompletionRequest(model="", system=system, messages=messages, purpose=purpose)
        try:
            provider, model = self.model_for(model_ref)
            request = CompletionRequest(model=model, system=system, messages=messages, purpose=purpose)
            completion = await provider.complete(request)
        except (ProviderError, OperatorError) as e:
            run.status, run.error = "error", str(e)
            run.duration_ms = (time.time() - run.started_at) * 1000
            await self.store.write(lambda conn: insert_run(conn, run))
            raise
        run.model_calls = 1
        run.duration_ms = (time.time() - run.started_at) * 1000
        if completion.usage is not None:
            run.input_tokens, run.output_tokens = (
                completion.usage.input_tokens,
                completion.usage.output_tokens,
            )
        else:
            run.input_tokens = estimate_tokens(len(system) + sum(m.char_count() for m in messages))
            run.output_tokens = estimate_tokens(completion.message.char_count())
            run.tokens_estimated = True
        run.last_input_tokens = run.input_tokens
        return ModelCall(completion, run)

    async def compact(self, thread: StoredThread, reason: str) -> CompactionOutcome:
        """Compact a thread by hand (/compact); the caller holds its conversation lock."""
        return await compact_thread(self, thread, reason)

    async def _settle(self, strategy: MemoryStrategy, thread: StoredThread, run_id: str | None) -> None:
        try:
            await strategy.settle(self, thread, run_id)
        except Exception:
            # After-run work is derived from persisted cursors: whatever failed is retried next time.
            log.exception(
                "agent %s: memory work after a run of %s failed", self.name, thread.conversation_key
            )

    async def _settle_later(self, key: str, strategy: MemoryStrategy, run_id: str | None) -> None:
        """After a run: do the memory work before the next message of the conversation loads."""
        self._enter()
        try:
            async with self.locks.hold(key):
                thread = self.threads.peek(key) if strategy.keeps_transcript else None
                if thread is not None and strategy.settle_due(thread):
                    await self._settle(strategy, thread, run_id)
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
