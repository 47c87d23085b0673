"""The memory context an agent gives its strategies: its store, models, embedder and audit trail.

Built once per agent (by its state, agentd.engine.state) and stateless: it reads the agent's current
definition at each call, so a hot reload needs no new context.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentd.config.models import AgentSpec
from agentd.engine.metering import metered
from agentd.engine.model_chain import Fallback, call_chain
from agentd.engine.resources import AgentResources
from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import ModelCall
from agentd.memory.runs import OFFLINE_PREFIX
from agentd.messages import Message, estimate_tokens
from agentd.providers.base import CompletionRequest, Embedder
from agentd.providers.windows import window_of
from agentd.run_context import current_run
from agentd.store.base import Store
from agentd.store.records import AuditRecord, RunRecord
from agentd.store.writes import AppendAudit, InsertRun


@dataclass(frozen=True, slots=True)
class CompletionLimits:
    """What a caller asks of a model call beyond its messages (an MCP server's sampling request)."""

    temperature: float | None = None
    max_output_tokens: int | None = None
    stop: tuple[str, ...] = ()


class AgentContext:
    """`MemoryContext` for one agent: reads the agent's current definition at each call."""

    def __init__(self, spec: Callable[[], AgentSpec], store: Store, resources: AgentResources):
        self._spec = spec  # the agent's current definition
        self._store = store
        self._resources = resources

    @property
    def agent(self) -> str:
        return self._spec().name

    @property
    def store(self) -> Store:
        return self._store

    @property
    def embedder(self) -> Embedder | None:
        return self._resources.embedder

    @property
    def secrets(self) -> str:
        return self._spec().memory.secrets

    def agent_model(self, small: bool = False) -> str:
        model = self._spec().model
        return (model.small or model.name) if small else model.name

    def model_window(self, ref: str) -> int | None:
        model = self._spec().model
        return window_of(ref, model.context_window if ref == model.name else None)

    def memory_model(self, preferred: str | None) -> str | None:
        if preferred:
            return preferred
        if self._resources.memory_extractor_model:
            return self._resources.memory_extractor_model
        model = self._spec().model
        for ref in (model.small, model.name):
            # the offline model cannot fold or extract: it only echoes what it was given
            if ref and not ref.startswith(OFFLINE_PREFIX):
                return ref
        return None

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
        limits: CompletionLimits = CompletionLimits(),
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
        current_run.set(run.id)
        fallbacks: list[Fallback] = []
        try:
            # a model that keeps failing is not called again until its pause ends (ModelPaused);
            # the agent's small model (or main model) falls back along its chain
            request = CompletionRequest(
                model=model_ref,
                system=system,
                messages=messages,
                purpose=purpose,
                temperature=limits.temperature,
                max_output_tokens=limits.max_output_tokens,
                stop=limits.stop,
            )
            model = self._spec().model
            completion, run.model = await metered(
                self._resources.meter,
                self.agent,
                (self._chain_of(model_ref), model.small_chain if model.small else None),
                request,
                lambda chain: call_chain(
                    chain,
                    request,
                    providers=self._resources.providers,
                    breakers=self._resources.breakers,
                    call=lambda provider, request: provider.complete(request),
                    on_fallback=fallbacks.append,
                    pause_last=True,
                ),
                trigger,
            )
        except (ProviderError, OperatorError) as e:
            run.status, run.error = "error", str(e)
            run.duration_ms = (time.time() - run.started_at) * 1000
            await self.store.write(InsertRun(run), *self._fallback_audit(fallbacks, run))
            raise
        if fallbacks:
            await self.store.write(*self._fallback_audit(fallbacks, run))
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

    def _chain_of(self, model_ref: str) -> tuple[str, ...]:
        """The fallback chain `model_ref` heads in the agent's definition (model.small's or model.name's),
        else the model alone (a strategy's own model has no fallbacks)."""
        model = self._spec().model
        for chain in (model.small_chain, model.chain):
            if chain[0] == model_ref:
                return chain
        return (model_ref,)

    def _fallback_audit(self, fallbacks: list[Fallback], run: RunRecord) -> list[AppendAudit]:
        if not fallbacks:
            return []
        records = [
            AuditRecord("model", "fallback", run.conversation_key, run.id, f.audit_data()) for f in fallbacks
        ]
        return [AppendAudit(self.agent, records, time.time())]

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
        await self.store.write(AppendAudit(self.agent, [record], time.time()))
