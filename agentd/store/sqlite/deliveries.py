"""Platform deliveries already answered, so a redelivery (or a restart) never answers twice; and the
model a conversation was switched to (`/model`), which is its own setting beside them."""

from __future__ import annotations

import sqlite3

from agentd.store.queries import ConversationModel, DeliveredReply, DeliverySeen
from agentd.store.records import Delivered
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import PruneDeliveries, RecordDelivery, SetConversationModel


@handles(DeliverySeen)
def delivery_seen(conn: sqlite3.Connection, q: DeliverySeen) -> bool:
    row = conn.execute(
        "SELECT 1 FROM inbound_events WHERE channel = ? AND event_id = ?", (q.channel, q.event_id)
    ).fetchone()
    return row is not None


# the delivery, its run's outcome, and the last reply that run stored in its thread (the thread's key
# leads the messages' primary key: only that thread's rows are read)
DELIVERED_SQL = """
    SELECT e.conversation_key, e.run_id, r.status, r.error,
           (SELECT m.body FROM messages m
             WHERE m.thread_id = r.thread_id AND m.run_id = e.run_id AND m.role = 'assistant'
             ORDER BY m.seq DESC LIMIT 1)
      FROM inbound_events e LEFT JOIN runs r ON r.id = e.run_id
     WHERE e.channel = ? AND e.event_id = ?"""


@handles(DeliveredReply)
def delivered_reply(conn: sqlite3.Connection, q: DeliveredReply) -> Delivered | None:
    row = conn.execute(DELIVERED_SQL, (q.channel, q.event_id)).fetchone()
    return None if row is None else Delivered.of_row(row)


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


@handles(ConversationModel)
def conversation_model(conn: sqlite3.Connection, q: ConversationModel) -> str | None:
    row = conn.execute(
        "SELECT model FROM conversation_models WHERE conversation_key = ?", (q.conversation_key,)
    ).fetchone()
    return None if row is None else str(row[0])


@handles(SetConversationModel)
def set_conversation_model(conn: sqlite3.Connection, op: SetConversationModel) -> None:
    if op.model is None:
        conn.execute("DELETE FROM conversation_models WHERE conversation_key = ?", (op.conversation_key,))
        return
    conn.execute(
        "INSERT INTO conversation_models (conversation_key, model, set_at) VALUES (?, ?, ?)"
        " ON CONFLICT (conversation_key) DO UPDATE SET model = excluded.model, set_at = excluded.set_at",
        (op.conversation_key, op.model, op.now),
    )
