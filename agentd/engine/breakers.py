"""Breakers for the models memory work and the chat call: a failing model is left alone for a while.

The chat's fallback chain (agentd.engine.model_chain) shares them: a primary that fails opens its
breaker, and while it is open the chain goes straight to the next model (one attempt, not one per turn).

After-run memory work (folds, extraction, summaries, compaction) calls a model
of its own. When that model keeps failing (unreachable, 5xx, 429 after the
provider's own retries, a missing key), calling it again on every turn only
adds the failure's latency to the chat and noise to the trail. So each model
reference has a breaker, shared by every agent of the daemon: a failure opens
it for a backoff (1 s, doubling, at most 60 s); while open, a memory call fails
at once with `ModelPaused` (no request is made) and the engine retries the work
in the background when the pause ends; the first call after it is the probe, and
a success closes the breaker. A request the provider refused as invalid (400,
413, 422) is the request's fault, not the model's, and leaves the breaker alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentd.errors import ModelPaused, OperatorError, ProviderError
from agentd.memory.patches import rejected_request

FIRST_PAUSE_S = 1.0
MAX_PAUSE_S = 60.0


@dataclass
class Breaker:
    failures: int = 0
    paused_until: float = 0.0
    last_error: str | None = None

    def describe(self, now: float) -> dict[str, Any]:
        open_ = self.paused_until > now
        return {
            "state": "open" if open_ else ("half-open" if self.failures else "closed"),
            "failures": self.failures,
            "retry_in_s": round(self.paused_until - now, 1) if open_ else 0.0,
            "last_error": self.last_error,
        }


class Breakers:
    def __init__(self, first_pause_s: float = FIRST_PAUSE_S, clock: Any = time.monotonic):
        """`first_pause_s` 0 turns pausing off (every failure is tried again at the next chance)."""
        self._first_pause = first_pause_s
        self._clock = clock
        self._by_model: dict[str, Breaker] = {}

    def check(self, model_ref: str) -> None:
        """Raise ModelPaused while the model's breaker is open."""
        breaker = self._by_model.get(model_ref)
        if breaker is None:
            return
        wait = breaker.paused_until - self._clock()
        if wait > 0:
            raise ModelPaused(
                f"memory model {model_ref} is paused for {wait:.1f} s after {breaker.failures} failure(s): "
                f"{breaker.last_error}",
                model=model_ref,
                retry_in=wait,
            )

    def paused_for(self, model_ref: str) -> float:
        """Seconds the model's breaker stays open (0 when it may be called): the chat's fallback chain
        skips a model while this is positive (agentd.engine.model_chain)."""
        breaker = self._by_model.get(model_ref)
        return max(0.0, breaker.paused_until - self._clock()) if breaker is not None else 0.0

    def state_of(self, model_ref: str) -> dict[str, Any] | None:
        """The model's breaker as `describe` shows it; None when it has not failed lately."""
        breaker = self._by_model.get(model_ref)
        return breaker.describe(self._clock()) if breaker is not None else None

    def succeeded(self, model_ref: str) -> None:
        self._by_model.pop(model_ref, None)

    def failed(self, model_ref: str, error: Exception) -> None:
        """Open (or keep open, for longer) the breaker, unless the request itself was refused."""
        if not isinstance(error, ProviderError | OperatorError) or rejected_request(error):
            return
        breaker = self._by_model.setdefault(model_ref, Breaker())
        breaker.failures += 1
        pause = min(MAX_PAUSE_S, self._first_pause * 2 ** (breaker.failures - 1))
        breaker.paused_until = self._clock() + pause
        breaker.last_error = str(error)

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every model that failed lately, by reference (closed ones are forgotten)."""
        now = self._clock()
        return {ref: b.describe(now) for ref, b in sorted(self._by_model.items())}
