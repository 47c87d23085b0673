"""A turn's model calls: down the agent's fallback chain, metered against its budgets, heard by the
person's sink as they are written."""

from __future__ import annotations

import logging

from agentd.engine.conversation import Conversation
from agentd.engine.metering import metered
from agentd.engine.model_chain import Fallback, call_chain
from agentd.engine.progress import TurnProgress
from agentd.engine.streaming import StepSink, call_model
from agentd.providers.base import Completion, CompletionRequest, ModelProvider
from agentd.store.records import AuditRecord, RunRecord

log = logging.getLogger("agentd.engine.turn")


class ModelChain:
    """The turn's model calls down the agent's fallback chain: each fallback joins the run's audit
    rows (once per turn), and the run records the model that answered last."""

    def __init__(self, conv: Conversation, run: RunRecord, progress: TurnProgress, sink: StepSink | None):
        self._conv, self._run, self._progress, self._sink = conv, run, progress, sink
        self._seen: set[tuple[str, str]] = set()

    async def call(self, request: CompletionRequest) -> Completion:
        resources, model = self._conv.agent.resources, self._conv.spec.model
        completion, ref = await metered(
            resources.meter,
            self._conv.agent.name,
            (model.chain, model.small_chain if model.small else None),
            request,
            lambda chain: call_chain(
                chain,
                request,
                providers=resources.providers,
                breakers=resources.breakers,
                call=self._call,
                on_fallback=self._fell_back,
                shown=lambda: self._sink is not None and self._sink.showing,
            ),
            self._run.trigger,  # a scheduled run's calls count as `schedule`, a message's as `message`
        )
        self._run.model = ref
        return completion

    async def _call(self, provider: ModelProvider, request: CompletionRequest) -> Completion:
        return await call_model(provider, request, self._sink)

    def _fell_back(self, step: Fallback) -> None:
        if (key := (step.from_ref, step.to_ref)) in self._seen:  # a later call skipping it says nothing new
            return
        self._seen.add(key)
        log.warning("run %s: model %s %s: trying %s", self._run.id, step.from_ref, step.reason, step.to_ref)
        self._progress.audit.append(
            AuditRecord("model", "fallback", self._run.conversation_key, self._run.id, step.audit_data())
        )
