"""Platform deliveries already answered, so a redelivery (or a restart) never answers twice."""

from __future__ import annotations

import sqlite3

from agentd.store.queries import DeliverySeen
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import PruneDeliveries, RecordDelivery


@handles(DeliverySeen)
def delivery_seen(conn: sqlite3.Connection, q: DeliverySeen) -> bool:
    row = conn.execute(
        "SELECT 1 FROM inbound_events WHERE channel = ? AND event_id = ?", (q.channel, q.event_id)
    ).fetchone()
    return row is not None


@handles(RecordDelivery)
def record_delivery(conn: sqlite3.Connection, op: RecordDelivery) -> None:
    d = op.delivery
    conn.execute(
        "INSERT OR IGNORE INTO inbound_events (channel, event_id, conversation_key, run_id, received_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (d.channel, d.event_id, d.conversation_key, op.run_id, op.now),
    )


@handles(PruneDeliveries)
def prune_deliveries(conn: sqlite3.Connection, op: PruneDeliveries) -> int:
    return conn.execute("DELETE FROM inbound_events WHERE received_at < ?", (op.older_than,)).rowcount
