"""Platform deliveries already answered, so a redelivery (or a restart) never answers twice."""

from __future__ import annotations

import sqlite3


def event_seen(conn: sqlite3.Connection, channel: str, event_id: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM inbound_events WHERE channel = ? AND event_id = ?", (channel, event_id)
        ).fetchone()
        is not None
    )


def record_event(
    conn: sqlite3.Connection,
    channel: str,
    event_id: str,
    conversation_key: str,
    run_id: str | None,
    now: float,
) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO inbound_events (channel, event_id, conversation_key, run_id, received_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (channel, event_id, conversation_key, run_id, now),
    )


def prune_events(conn: sqlite3.Connection, older_than: float) -> int:
    return conn.execute("DELETE FROM inbound_events WHERE received_at < ?", (older_than,)).rowcount
