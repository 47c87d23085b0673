"""Platform deliveries already answered: a redelivery, to this daemon or another, is answered once.

The de-duplication is the table's primary key (agent, channel, event id), not any daemon's memory.
Beside them, the model a conversation was switched to (`/model`), its own setting.
"""

from __future__ import annotations

from agentd.store.postgres.handlers import Cx, Later, handles, rowcount
from agentd.store.queries import ConversationModel, DeliveredReply, DeliverySeen
from agentd.store.records import Delivered
from agentd.store.writes import PruneDeliveries, RecordDelivery, SetConversationModel


def record_delivery(
    cx: Cx, channel: str, event_id: str, conversation_key: str, run_id: str | None, now: float
) -> None:
    cx.run(
        "INSERT INTO inbound_events (agent_id, channel, event_id, conversation_key, run_id, received_at)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (cx.agent_id, channel, event_id, conversation_key, run_id, now),
    )


@handles(RecordDelivery)
def _record_delivery(cx: Cx, op: RecordDelivery) -> None:
    d = op.delivery
    record_delivery(cx, d.channel, d.event_id, d.conversation_key, op.run_id, op.now)


@handles(DeliverySeen)
def delivery_seen(cx: Cx, q: DeliverySeen) -> Later[bool]:
    cur = cx.run(
        "SELECT 1 FROM inbound_events WHERE agent_id = %s AND channel = %s AND event_id = %s",
        (cx.agent_id, q.channel, q.event_id),
    )
    return Later(lambda: cur.fetchone() is not None)


@handles(DeliveredReply)
def delivered_reply(cx: Cx, q: DeliveredReply) -> Later[Delivered | None]:
    cur = cx.run(
        """SELECT e.conversation_key, e.run_id, r.status, r.error,
                  (SELECT m.body FROM messages m
                    WHERE m.thread_id = r.thread_id AND m.run_id = e.run_id AND m.role = 'assistant'
                    ORDER BY m.seq DESC LIMIT 1)
             FROM inbound_events e LEFT JOIN runs r ON r.agent_id = e.agent_id AND r.id = e.run_id
            WHERE e.agent_id = %s AND e.channel = %s AND e.event_id = %s""",
        (cx.agent_id, q.channel, q.event_id),
    )
    return Later(lambda: None if (row := cur.fetchone()) is None else Delivered.of_row(row))


@handles(PruneDeliveries)
def prune_deliveries(cx: Cx, op: PruneDeliveries) -> Later[int]:
    return rowcount(
        cx.run(
            "DELETE FROM inbound_events WHERE agent_id = %s AND received_at < %s",
            (cx.agent_id, op.older_than),
        )
    )


@handles(ConversationModel)
def conversation_model(cx: Cx, q: ConversationModel) -> Later[str | None]:
    cur = cx.run(
        "SELECT model FROM conversation_models WHERE agent_id = %s AND conversation_key = %s",
        (cx.agent_id, q.conversation_key),
    )
    return Later(lambda: None if (row := cur.fetchone()) is None else str(row[0]))


@handles(SetConversationModel)
def set_conversation_model(cx: Cx, op: SetConversationModel) -> None:
    if op.model is None:
        cx.run(
            "DELETE FROM conversation_models WHERE agent_id = %s AND conversation_key = %s",
            (cx.agent_id, op.conversation_key),
        )
        return
    cx.run(
        "INSERT INTO conversation_models (agent_id, conversation_key, model, set_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (agent_id, conversation_key) DO UPDATE SET model = excluded.model, set_at = excluded.set_at",
        (cx.agent_id, op.conversation_key, op.model, op.now),
    )
