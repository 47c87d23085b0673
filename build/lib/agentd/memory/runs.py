"""Memory runs: the model that may write structured memory, and committing what a run produced.

A memory run (a compaction, a summary refresh, a fold, an extraction, storing
episodes) commits in one transaction: what it produced, the layer's moved
cursor, its run rows and its audit rows, so a crash leaves either all of it or
none, and the work is simply done again from the old cursor. What it writes is
screened for secrets on the way (`memory.secrets`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentd.memory.base import MemoryContext
from agentd.memory.screening import REDACTED, SecretScreen
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


@dataclass(frozen=True, slots=True)
class Committed:
    """What a memory run committed: the results of `produced`, and `produced` as written (secrets
    redacted), so what the hot thread keeps is what the store holds."""

    results: list[Any]
    produced: list[Write[Any]]


async def commit_memory_run(
    ctx: MemoryContext,
    *,
    produced: Sequence[Write[Any]] = (),
    cursor: tuple[StoredThread, str, LayerState] | None = None,
    runs: Sequence[RunRecord] = (),
    audits: Sequence[AuditRecord] = (),
) -> Committed:
    """Commit a memory run's writes, cursor, run rows and audit rows together. The cursor (thread,
    layer, new state) reaches the hot thread only once committed.

    Every memory text the run writes is screened for secrets first (agentd/memory/screening.py):
    nobody asked for these writes with a tool, so under `refuse` too they are redacted, not refused.
    """
    now = time.time()
    screen = SecretScreen(ctx.secrets)
    written = [screen.op(op) for op in produced]
    ops: list[Write[Any]] = list(written)
    if cursor is not None:
        thread, layer, state = cursor
        assert thread.id is not None
        state = screen.layer_state(state, layer)
        ops.append(PutLayerState(thread.id, layer, state, now))
    ops += [InsertRun(run) for run in runs]
    key, run_id = _about(cursor, runs, audits)
    audits = [*audits, *screen.audits(REDACTED, key, run_id)]
    if audits:
        ops.append(AppendAudit(ctx.agent, audits, now))
    results = await ctx.store.write(*ops)
    if cursor is not None:
        state.updated_at = now
        thread.layers[layer] = state
        moved = results[len(written)]  # (a shared store's layers version after this write)
        if moved is not None and moved == thread.layers_version + 1:
            # nobody else wrote a layer state meanwhile: this copy is current, the next claim keeps it
            thread.layers_version = moved
    return Committed(results[: len(written)], written)


def _about(
    cursor: tuple[StoredThread, str, LayerState] | None,
    runs: Sequence[RunRecord],
    audits: Sequence[AuditRecord],
) -> tuple[str | None, str | None]:
    """The conversation and run a memory run's own audit events name (for its secrets' events)."""
    key = cursor[0].conversation_key if cursor is not None else None
    run_id = runs[0].id if runs else None
    for audit in audits:
        key = key or audit.conversation_key
        run_id = run_id or audit.run_id
    return key, run_id
