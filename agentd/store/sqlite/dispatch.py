"""Which SQL answers which query or write: the SQL modules, one per section of agentd/store/queries.py
and agentd/store/writes.py, each registering its handlers (agentd/store/sqlite/handlers.py) as it is
imported here. tests/test_store_contract.py checks that every Query and Write has one."""

from __future__ import annotations

import sqlite3
from typing import Any

from agentd.store.sqlite import (
    approvals,
    audit,
    deliveries,
    episode_reads,
    episodes,
    facts,
    identity,
    media,
    memories,
    memory_state,
    people,
    runs,
    transcripts,
)
from agentd.store.sqlite.handlers import HANDLERS

MODULES = (
    identity,
    deliveries,
    media,
    transcripts,
    runs,
    audit,
    approvals,
    memories,
    facts,
    episodes,
    episode_reads,
    memory_state,
    people,
)
__all__ = ["HANDLERS", "MODULES", "apply"]


def apply(conn: sqlite3.Connection, item: Any) -> Any:
    try:
        handler = HANDLERS[type(item)]
    except KeyError:
        raise TypeError(f"the SQLite store has no handler for {type(item).__name__}") from None
    return handler(conn, item)
