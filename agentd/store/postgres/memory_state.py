"""Per thread and layer: what a memory strategy carries between turns, on PostgreSQL.

Every write moves the thread's `layers_version`, so a daemon whose copy of the thread holds older
layer states reads them again at its next claim.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import LayerStateOf
from agentd.store.records import LayerState
from agentd.store.writes import PutLayerState


@handles(LayerStateOf)
def get_layer_state(cx: Cx, q: LayerStateOf) -> Later[LayerState]:
    cur = cx.run(
        "SELECT data, upto_seq, updated_at FROM memory_state WHERE thread_id = %s AND layer = %s"
        " AND agent_id = %s",
        (q.thread_id, q.layer, cx.agent_id),
    )

    def read() -> LayerState:
        row = cur.fetchone()
        return LayerState() if row is None else LayerState(json.loads(row[0]), row[1], row[2])

    return Later(read)


@handles(PutLayerState)
def put_layer_state(cx: Cx, op: PutLayerState) -> Later[int | None]:
    data = json.dumps(op.state.data, separators=(",", ":"))
    cx.run(
        "INSERT INTO memory_state (agent_id, thread_id, layer, data, upto_seq, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (thread_id, layer) DO UPDATE"
        " SET data = excluded.data, upto_seq = excluded.upto_seq, updated_at = excluded.updated_at"
        " WHERE memory_state.agent_id = excluded.agent_id",
        (cx.agent_id, op.thread_id, op.layer, data, op.state.upto_seq, op.now),
    )
    moved = cx.run(
        "UPDATE threads SET layers_version = layers_version + 1 WHERE id = %s AND agent_id = %s"
        " RETURNING layers_version",
        (op.thread_id, cx.agent_id),
    )
    return Later(lambda: _first(moved.fetchone()))


def _first(row: tuple[Any, ...] | None) -> Any:
    return None if row is None else row[0]
