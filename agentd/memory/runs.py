"""Memory runs: the model that may write structured memory, and committing what a run produced.

A memory run (a compaction, a summary refresh, a fold, an extraction, storing
episodes) commits in one transaction: what it produced, the layer's moved
cursor, its run rows and its audit rows, so a crash leaves either all of it or
none, and the work is simply done again from the old cursor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from agentd.memory.base import MemoryContext
from agentd.store.records import AuditRecord, LayerState, RunRecord, StoredThread
from agentd.store.writes import AppendAudit, InsertRun, PutLayerState, Write

OFFLINE_PREFIX = "offline/"


def structured_model(ctx: MemoryContext, preferred: str | None) -> str | None:
    """The model for folds and extraction (strategy model > memory_extractor_model > the agent's).

    None when there is none, or only the offline model: it echoes what it is given
    and cannot write a patch or a fact list.
    """
    ref = ctx.memory_model(preferred)
    return None if ref is None or ref.startswith(OFFLINE_PREFIX) else ref


async def commit_memory_run(
    ctx: MemoryContext,
    *,
    produced: Sequence[Write[Any]] = (),
    cursor: tuple[StoredThread, str, LayerState] | None = None,
    runs: Sequence[RunRecord] = (),
    audits: Sequence[AuditRecord] = (),
) -> list[Any]:
    """Commit a memory run's writes, cursor, run rows and audit rows together; returns the results
    of `produced`. The cursor (thread, layer, new state) reaches the hot thread only once committed."""
    now = time.time()
    ops: list[Write[Any]] = list(produced)
    if cursor is not None:
        thread, layer, state = cursor
        assert thread.id is not None
        ops.append(PutLayerState(thread.id, layer, state, now))
    ops += [InsertRun(run) for run in runs]
    if audits:
        ops.append(AppendAudit(ctx.agent, audits, now))
    results = await ctx.store.write(*ops)
    if cursor is not None:
        thread, layer, state = cursor
        state.updated_at = now
        thread.layers[layer] = state
        moved = results[len(produced)]  # (a shared store's layers version after this write)
        if moved is not None and moved == thread.layers_version + 1:
            # nobody else wrote a layer state meanwhile: this copy is current, the next claim keeps it
            thread.layers_version = moved
    return results[: len(produced)]
