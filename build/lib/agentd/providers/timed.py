"""A provider whose completions report how long they took and how they ended (the daemon's metrics)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentd.providers.base import Completion, CompletionRequest, ModelProvider

# provider name, request purpose (chat, summary, ...), seconds, outcome (ok, error, cancelled)
ReportCall = Callable[[str, str, float, str], None]


class TimedProvider:
    def __init__(self, name: str, inner: ModelProvider, report: ReportCall):
        self.name = name
        self._inner = inner
        self._report = report

    async def complete(self, request: CompletionRequest) -> Completion:
        started = time.perf_counter()
        outcome = "error"
        try:
            completion = await self._inner.complete(request)
            outcome = "ok"
            return completion
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self._report(self.name, request.purpose, time.perf_counter() - started, outcome)

    def __getattr__(self, name: str) -> Any:
        # other capabilities of the provider (checked by type or attribute) pass through untimed
        return getattr(self._inner, name)
