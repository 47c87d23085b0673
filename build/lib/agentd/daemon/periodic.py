"""The daemon's periodic jobs, each a task of its own: folder reloads, GC freezing, delivery pruning."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("agentd")
GC_FREEZE_EVERY = 30.0  # seconds
PRUNE_EVERY = 3600.0  # seconds
CLOSE_IDLE_FILES_EVERY = 10.0  # seconds: how often files idle past store.close_idle_after_s are closed
DELIVERY_MEMORY_S = 7 * 86400.0  # platform redeliveries come within minutes; a week is plenty


async def every(interval: float, job: Callable[[], Awaitable[None]], what: str) -> None:
    """Run `job` every `interval` seconds until cancelled; a failing run is logged, never fatal."""
    while True:
        await asyncio.sleep(interval)
        try:
            await job()
        except Exception:
            log.exception("%s failed", what)


async def freeze_gc() -> None:
    """Move long-lived objects (hot transcripts, loaded specs) out of the cyclic GC's reach.

    Full collections then stop walking them: without this the p95 of a turn on
    a 10,000-message thread is several times its p50 (performance.md). Messages
    hold no cycles, so refcounting still frees them when a thread is evicted.
    """
    gc.freeze()


def delivery_cutoff() -> float:
    return time.time() - DELIVERY_MEMORY_S
