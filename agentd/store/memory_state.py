"""Per thread and layer: what a memory strategy carries between turns, and how far it has read."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class LayerState:
    data: dict[str, Any] = field(default_factory=dict)
    upto_seq: int = 0  # the last message seq this layer has taken in (folded, summarised, extracted)
    updated_at: float | None = None


def get_layer_state(conn: sqlite3.Connection, thread_id: int, layer: str) -> LayerState:
    row = conn.execute(
        "SELECT data, upto_seq, updated_at FROM memory_state WHERE thread_id = ? AND layer = ?",
        (thread_id, layer),
    ).fetchone()
    return LayerState() if row is None else LayerState(json.loads(row[0]), row[1], row[2])


def put_layer_state(
    conn: sqlite3.Connection, thread_id: int, layer: str, state: LayerState, now: float
) -> None:
    conn.execute(
        "INSERT INTO memory_state (thread_id, layer, data, upto_seq, updated_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (thread_id, layer) DO UPDATE SET data = excluded.data, upto_seq = excluded.upto_seq,"
        " updated_at = excluded.updated_at",
        (thread_id, layer, json.dumps(state.data, separators=(",", ":")), state.upto_seq, now),
    )
    state.updated_at = now


def delete_layer_states(conn: sqlite3.Connection, thread_id: int) -> int:
    """Forget every layer's state of a thread (on /reset, with its transcript)."""
    return conn.execute("DELETE FROM memory_state WHERE thread_id = ?", (thread_id,)).rowcount
