"""What the daemon watches without the engine's help: runs as they commit, model calls, store commits.

The engine already writes every run it makes (a turn, a command, a compaction, a
fold...) through its store, so the daemon hands each agent an `ObservedStore`: the
agent's own store, which reports the runs of each write once it has committed.
Model calls are timed by the provider registry (`TimedProvider`) and commits by the
store executor (SQLite's, or PostgreSQL's). From these come the one INFO line per run
and the metrics; the engine itself only names the run its task is working on
(`current_run`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from agentd.store.base import KnowsIfAbsent, Store
from agentd.store.claims import Claim, KnownThread
from agentd.store.queries import Query
from agentd.store.records import AuditRecord, RunRecord
from agentd.store.writes import AppendAudit, CommitTurn, InsertRun, Write

T = TypeVar("T")
run_log = logging.getLogger("agentd.runs")


class Observer(Protocol):
    def run_committed(self, agent: str, run: RunRecord) -> None: ...

    def model_call(self, provider: str, purpose: str, seconds: float, outcome: str) -> None: ...

    def model_fallback(self, agent: str, from_model: str, reason: str) -> None:
        """A model of a fallback chain failed (or was skipped) and the next was tried (its audit row committed)."""
        ...

    def model_overflow(self, agent: str, model: str, trigger: str, recovery: str) -> None:
        """A prompt was (`overflow`) or would have been (`window`) past the model's context window and
        was recovered (`compaction` or `left_out`: agentd.engine.overflow); its audit row committed."""
        ...

    def store_commit(self, seconds: float) -> None:
        """Called on a store thread (SQLite's, or one of PostgreSQL's)."""
        ...


class ObservedStore:
    """An agent's store that tells the observer about every run once its write has committed."""

    def __init__(self, inner: Store, agent: str, observer: Observer):
        self._inner = inner
        self._agent = agent
        self._observer = observer

    @property
    def label(self) -> str:
        return self._inner.label

    @property
    def shared(self) -> bool:
        return self._inner.shared

    async def open(self) -> list[str]:
        return await self._inner.open()

    async def close(self) -> None:
        await self._inner.close()

    async def read(self, query: Query[T]) -> T:
        return await self._inner.read(query)

    async def read_many(self, *queries: Query[Any]) -> list[Any]:
        return await self._inner.read_many(*queries)

    async def write(self, *ops: Write[Any]) -> list[Any]:
        results = await self._inner.write(*ops)
        for run in runs_in(ops):
            self._observer.run_committed(self._agent, run)
        for record in model_events(ops, "fallback"):
            self._observer.model_fallback(
                self._agent, str(record.data.get("from")), str(record.data.get("reason"))
            )
        for record in model_events(ops, "overflow"):
            data = record.data
            self._observer.model_overflow(
                self._agent, str(data.get("model")), str(data.get("trigger")), str(data.get("recovery"))
            )
        return results

    def claim(
        self, conversation_key: str, purpose: str = "turn", known: KnownThread | None = None
    ) -> AbstractAsyncContextManager[Claim]:
        return self._inner.claim(conversation_key, purpose, known)

    # Optional capabilities (checked by type, with isinstance) are named here: isinstance looks the
    # class up, never __getattr__ (Python 3.12+).
    def absent(self) -> bool:
        return isinstance(self._inner, KnowsIfAbsent) and self._inner.absent()

    def __getattr__(self, name: str) -> Any:
        # what a backend offers beyond the seam (a test's reach into its backend, say) stays reachable
        return getattr(self._inner, name)


def runs_in(ops: Sequence[Write[Any]]) -> list[RunRecord]:
    return [op.run for op in ops if isinstance(op, InsertRun | CommitTurn)]


def model_events(ops: Sequence[Write[Any]], action: str) -> list[AuditRecord]:
    """The `model/<action>` audit rows of a write: `fallback` (agentd.engine.model_chain), `overflow`
    (agentd.engine.overflow)."""
    return [
        record
        for op in ops
        if isinstance(op, AppendAudit)
        for record in op.records
        if record.kind == "model" and record.action == action
    ]


def log_run(agent: str, run: RunRecord) -> None:
    """The one INFO line of a run: logfmt in text, and the same fields as `data` in JSON lines."""
    data: dict[str, Any] = {
        "agent": agent,
        "conversation": run.conversation_key,
        "trigger": run.trigger,
        "model": run.model,
        "duration_ms": round(run.duration_ms or 0.0, 1),
        "tokens_in": run.input_tokens,
        "tokens_out": run.output_tokens,
        "tokens_estimated": run.tokens_estimated,
        "outcome": run.status,
    }
    if run.parent_run_id:
        data["parent_run_id"] = run.parent_run_id
    if run.error:
        data["error"] = run.error
    text = " ".join(f"{key}={_logfmt(value)}" for key, value in data.items() if value is not None)
    run_log.info("run %s", text, extra={"run_id": run.id, "data": data})


def _logfmt(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class DaemonObserver:
    """The daemon's observer: each run's log line, and the metrics of everything observed."""

    def __init__(self, metrics: Observer):
        self.metrics = metrics

    def run_committed(self, agent: str, run: RunRecord) -> None:
        log_run(agent, run)
        self.metrics.run_committed(agent, run)

    def model_call(self, provider: str, purpose: str, seconds: float, outcome: str) -> None:
        self.metrics.model_call(provider, purpose, seconds, outcome)

    def model_fallback(self, agent: str, from_model: str, reason: str) -> None:
        self.metrics.model_fallback(agent, from_model, reason)

    def model_overflow(self, agent: str, model: str, trigger: str, recovery: str) -> None:
        self.metrics.model_overflow(agent, model, trigger, recovery)

    def store_commit(self, seconds: float) -> None:
        self.metrics.store_commit(seconds)
