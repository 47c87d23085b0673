"""One agent's state: its current definition, its store, hot threads, locks, persistent memory, caches.

`spec` may be swapped by a hot reload; a turn reads it once at its start, so
in-flight runs finish on the definition they began with. The memory context its
strategies get (`context`) is built here once; a conversation as one event sees
it is opened by agentd.engine.conversation.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.context import AgentContext
from agentd.engine.conversations import ConversationLocks, HotThreads
from agentd.engine.job_tools import job_tools
from agentd.engine.jobs import JobBook
from agentd.engine.resources import AgentResources
from agentd.engine.stopping import RunStops
from agentd.engine.subagents import slot_override, subagent_tools
from agentd.engine.tools import memory_tools
from agentd.memory.base import Memory
from agentd.memory.persistent import PersistentMemory, linked_scopes, persistent_scope
from agentd.memory.registry import memory_for
from agentd.store.base import Store
from agentd.store.claims import Claim
from agentd.store.queries import ConversationMark, ConversationModel
from agentd.store.records import ApprovalRecord, StoredThread
from agentd.tools.base import Tool
from agentd.tools.mcp_servers import McpServers

NO_CLAIM = Claim()
RECENT_EVENTS = 10_000  # platform deliveries remembered in memory (the store remembers them all)
MEMORY_CACHE = 64
CHOSEN_CACHE = 10_000  # conversations whose /model choice is held in memory


class AgentState:
    def __init__(
        self, spec: AgentSpec, store: Store, resources: AgentResources, tool_servers: McpServers | None = None
    ):
        self.spec = spec
        self.store = store
        self.resources = resources
        # the agent's MCP servers (started and stopped with the agent: agentd.engine.agent)
        self.tool_servers = tool_servers if tool_servers is not None else McpServers(spec.name)
        self.locks = ConversationLocks()
        # after-run memory work that need not precede the next turn runs under its own lock, beside it
        self.memory_locks = ConversationLocks()
        # a conversation with a turn or its memory work under way is never dropped from memory
        self.threads = HotThreads(
            store, resources.hot_budget, lambda key: self.locks.held(key) or self.memory_locks.held(key)
        )
        # the memory context every strategy of this agent gets: stateless, it reads the current spec
        self.context = AgentContext(lambda: self.spec, store, resources)
        self.persistent = PersistentMemory(store, spec.name, spec.memory.max_value_chars, spec.memory.secrets)
        # platform deliveries seen lately: (channel, event id), oldest first
        self.recent_events: OrderedDict[tuple[str, str], None] = OrderedDict()
        # runs paused for a person's approval, by approval id (kept by agentd.engine.approvals)
        self.waiting_approvals: dict[str, ApprovalRecord] = {}
        self.stops = RunStops()  # the turns running now, for /stop and max_run_s
        # the model /model chose per conversation, as read from the store (None: the agent file's)
        self.chosen_models: dict[str, str | None] = {}
        self._switched: dict[tuple[int, str], tuple[AgentSpec, AgentSpec]] = {}
        self._memories: dict[tuple[int, int], tuple[AgentSpec, Any, Memory]] = {}
        self._tools: tuple[AgentSpec, list[Tool]] | None = None
        self.jobs = JobBook(spec.name, store, lambda: self.spec, resources.clock)  # scheduled jobs

    @property
    def name(self) -> str:
        return self.spec.name

    def update_spec(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.persistent.max_value_chars = spec.memory.max_value_chars
        self.persistent.secrets = spec.memory.secrets

    async def switched(self, spec: AgentSpec, conversation_key: str) -> AgentSpec:
        """`spec` with the model `/model` chose for the conversation, while `models_allowed` still
        allows it (the store is read only for an agent that allows any; on a shared store with every
        turn, as a switch made on another daemon holds from the next turn); built once per pair, so
        the memory and tools cached per definition stay cached."""
        if not spec.models_allowed:
            return spec
        # on a shared store another daemon may have switched it: read it with every turn there
        if self.store.shared or conversation_key not in self.chosen_models:
            if len(self.chosen_models) >= CHOSEN_CACHE:
                self.chosen_models.clear()
            chosen = await self.store.read(ConversationModel(conversation_key))
            self.chosen_models[conversation_key] = chosen
        chosen = self.chosen_models[conversation_key]
        if chosen is None or chosen == spec.model.name or chosen not in spec.models_allowed:
            return spec
        cached = self._switched.get((id(spec), chosen))
        if cached is not None and cached[0] is spec:
            return cached[1]
        if len(self._switched) >= MEMORY_CACHE:
            self._switched.clear()
        # the chosen model goes first; the file's fallbacks stay behind it. The file's context_window
        # is its own model's: the chosen one's comes from the table or its provider's errors.
        fallbacks = [ref for ref in spec.model.chain if ref != chosen]
        model = spec.model.model_copy(update={"name": chosen, "fallbacks": fallbacks, "context_window": None})
        switched = spec.model_copy(update={"model": model})
        self._switched[(id(spec), chosen)] = (spec, switched)
        return switched

    def memory_of(self, spec: AgentSpec, conversation_key: str) -> Memory:
        """The memory a conversation gets under `spec`: a sub-agent slot's override when the
        conversation is one (read off its key), else the definition's own; built once per pair."""
        override = slot_override(spec.name, conversation_key, self.resources.peers)
        key = (id(spec), id(override))
        cached = self._memories.get(key)
        if cached is not None and cached[0] is spec and cached[1] is override:
            return cached[2]
        if len(self._memories) >= MEMORY_CACHE:
            self._memories.clear()
        memory = memory_for(spec, override)
        self._memories[key] = (spec, override, memory)
        return memory

    async def thread(self, conversation_key: str, memory: Memory, claim: Claim | None = None) -> StoredThread:
        """The conversation's hot thread, holding what `memory` reads (checked against the claim's
        mark on a shared store), or an empty one when the memory keeps no transcript.

        Without a claim (a view: the inspector, /status, the conversation route) nothing is taken,
        but on a shared store the cached copy is still checked against where the store stands now:
        other daemons may have answered the conversation since this one last did."""
        if claim is None:
            shared = self.store.shared
            claim = await self.store.read(ConversationMark(conversation_key)) if shared else NO_CLAIM
        if claim.memories_version is not None:
            await self.persistent.sync(claim.memories_version)
        if not memory.keeps_transcript:
            return StoredThread(conversation_key)
        reads, ctx = memory.tail_from, self.context
        return await self.threads.get(conversation_key, lambda t: reads(ctx, t), claim.thread, claim.tail)

    async def trim(self, conversation_key: str, memory: Memory) -> None:
        """After a turn or after-run work: the hot thread keeps only what `memory` reads."""
        if memory.keeps_transcript:
            ctx = self.context
            await self.threads.trim(conversation_key, lambda t: memory.tail_from(ctx, t))

    def memory_keys(
        self, spec: AgentSpec, conversation_key: str, user_id: str | None, linked: tuple[str, ...] = ()
    ) -> list[str]:
        """The persistent-memory keys a conversation's model sees (with persistent_scope user: the
        speaker's, and their linked accounts')."""
        scope = persistent_scope(spec.memory, conversation_key, user_id)
        return self.persistent.keys(scope, linked_scopes(spec.memory, linked))

    def tools(self, spec: AgentSpec) -> list[Tool]:
        """The tools every turn of this definition gets (memory tools, sub-agents, MCP servers'),
        before the policy says which are offered."""
        cached = self._tools
        if cached is None or cached[0] is not spec:
            # Memory tools depend only on the definition: built once per definition, not per turn.
            built: list[Tool] = []
            if spec.memory.persistent:
                memory_spec = spec.memory
                built = memory_tools(
                    self.persistent,
                    lambda call: persistent_scope(memory_spec, call.conversation_key, call.user_id),
                    lambda call: linked_scopes(memory_spec, call.linked),
                )
            if spec.schedule is not None and spec.schedule.from_chat:
                built += job_tools(self.jobs)
            cached = self._tools = (spec, built)
        # Sub-agent tools describe peers, which reload on their own, and MCP servers' tools change
        # while they run: both are read per turn.
        subagents = subagent_tools(spec.name, spec, self.resources.peers) if spec.subagents else []
        return [*cached[1], *subagents, *self.tool_servers.tools()]
