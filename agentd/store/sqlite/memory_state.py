"""Per thread and layer: what a memory strategy carries between turns, and how far it has read."""

from __future__ import annotations

import json
import sqlite3

from agentd.store.queries import LayerStateOf
from agentd.store.records import LayerState
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import PutLayerState


@handles(LayerStateOf)
def get_layer_state(conn: sqlite3.Connection, q: LayerStateOf) -> LayerState:
    row = conn.execute(
        "SELECT data, upto_seq, updated_at FROM memory_state WHERE thread_id = ? AND layer = ?",
        (q.thread_id, q.layer),
    ).fetchone()
    return LayerState() if row is None else LayerState(json.loads(row[0]), row[1], row[2])


@handles(PutLayerState)
def put_layer_state(conn: sqlite3.Connection, op: PutLayerState) -> None:
    conn.execute(
        "INSERT INTO memory_state (thread_id, layer, data, upto_seq, updated_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (thread_id, layer) DO UPDATE SET data = excluded.data, upto_seq = excluded.upto_seq,"
        " updated_at = excluded.updated_at",
        (op.thread_id, op.layer, json.dumps(op.state.data, separators=(",", ":")), op.state.upto_seq, op.now),
    )
