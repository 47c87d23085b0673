"""A model call that falls back: the models of a chain tried in order until one answers.

What falls back is what another model can help with: the model is down (5xx, 529 overloaded,
timeouts, connection failures), rate-limited after the provider's own retries (`Retry-After`
honoured there, agentd.providers.http), its key is missing or refused, or it is not served.
What does not: a request the provider judged invalid (400, 413, 422: the next model would refuse
it too) and a prompt past the context window (recovered by compaction, not by another model).
Nor does anything once part of the reply has been shown to the person: the part shown stays,
and the failure is said (agentd.engine.turn).

Each model's breaker (agentd.engine.breakers, shared with memory work, per provider/model) is
opened by a failure; while it is open the chain skips that model for the next one, so a dead
primary costs one attempt per pause, not one per turn, and is tried again once its pause ends.
The last model of a chain is always tried (the chat must try something), unless the caller asks
for `ModelPaused` instead (memory work, which waits and retries in the background).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentd.engine.breakers import Breakers
from agentd.errors import (
    AUTH,
    CONNECTION,
    NOT_FOUND,
    OTHER,
    OVERLOADED,
    RATE_LIMITED,
    SERVER_ERROR,
    STREAM_BROKEN,
    TIMEOUT,
    UNREADABLE,
    OperatorError,
    ProviderError,
)
from agentd.providers.base import Completion, CompletionRequest, ModelProvider
from agentd.providers.registry import ProviderRegistry

PAUSED = "paused"  # the model was skipped: its breaker is open after recent failures
UNAVAILABLE = "unavailable"  # an operator problem with the provider (an unset variable of its settings)
FALLS_BACK = frozenset(
    {
        RATE_LIMITED,
        OVERLOADED,
        SERVER_ERROR,
        TIMEOUT,
        CONNECTION,
        AUTH,
        "missing_key",
        UNAVAILABLE,
        NOT_FOUND,
        STREAM_BROKEN,
        UNREADABLE,
    }
)


@dataclass(frozen=True, slots=True)
class Fallback:
    """One step down the chain: `from_ref` failed (or was skipped) for `reason`, `to_ref` is next."""

    from_ref: str
    to_ref: str
    reason: str
    error: str

    def audit_data(self) -> dict[str, Any]:
        return {"from": self.from_ref, "to": self.to_ref, "reason": self.reason, "error": self.error}


def reason_of(error: Exception) -> str:
    """What failed, as ProviderError.reason says it (an operator problem without one: unavailable)."""
    reason = getattr(error, "reason", None)
    if isinstance(reason, str):
        return reason
    return UNAVAILABLE if isinstance(error, OperatorError) else OTHER


def falls_back(error: Exception) -> bool:
    return isinstance(error, ProviderError | OperatorError) and reason_of(error) in FALLS_BACK


Call = Callable[[ModelProvider, CompletionRequest], Awaitable[Completion]]


async def call_chain(
    chain: Sequence[str],
    request: CompletionRequest,
    *,
    providers: ProviderRegistry,
    breakers: Breakers,
    call: Call,
    on_fallback: Callable[[Fallback], None],
    shown: Callable[[], bool] = lambda: False,
    pause_last: bool = False,
) -> tuple[Completion, str]:
    """The first answer of the chain's models to `request` (its `model` set to each in turn), and
    the reference of the model that gave it. `shown` says whether part of a reply reached the
    person (then a failure is raised, not passed on). `pause_last`: a last model whose breaker is
    open raises ModelPaused instead of being tried. Raises the last failure when none answers."""
    for index, ref in enumerate(chain):
        last = index == len(chain) - 1
        wait = breakers.paused_for(ref)
        if wait > 0 and not last:
            state = breakers.state_of(ref) or {}
            on_fallback(Fallback(ref, chain[index + 1], PAUSED, str(state.get("last_error") or "")))
            continue
        if wait > 0 and pause_last:
            breakers.check(ref)  # raises ModelPaused, saying why
        try:
            provider, model = providers.resolve(ref)
            completion = await call(provider, replace(request, model=model))
        except (ProviderError, OperatorError) as e:
            breakers.failed(ref, e)
            if last or shown() or not falls_back(e):
                raise
            on_fallback(Fallback(ref, chain[index + 1], reason_of(e), str(e)))
            continue
        breakers.succeeded(ref)
        return completion, ref
    raise AssertionError("not reached: a chain has at least its model, and its last one returns or raises")


def chain_facts(breakers: Breakers, chain: Sequence[str]) -> list[dict[str, Any]]:
    """Each model of the chain and its breaker (`skipped` while it is open), for /status and GET /agents."""
    facts = []
    for ref in chain:
        state = breakers.state_of(ref) or {
            "state": "closed",
            "failures": 0,
            "retry_in_s": 0.0,
            "last_error": None,
        }
        facts.append({"model": ref, **state, "skipped": state["state"] == "open" and ref != chain[-1]})
    return facts
