"""Which SQL answers which query or write on PostgreSQL: the SQL modules, one per section of
agentd/store/queries.py and agentd/store/writes.py, each registering its handlers
(agentd/store/postgres/handlers.py) as it is imported here; and how a batch applies them.
tests/test_store_contract.py checks that every Query and Write has one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.store.postgres import (
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
from agentd.store.postgres.handlers import HANDLERS, READS_MIDWAY, SEVERAL_STATEMENTS, Cx, Later

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
__all__ = ["HANDLERS", "MODULES", "Cx", "apply", "one_statement", "reads_midway", "resolve"]


def reads_midway(ops: Sequence[Any]) -> bool:
    """Whether any of these writes reads a row before the batch's statements are all sent."""
    return any(check(op) for op in ops if (check := READS_MIDWAY.get(type(op))) is not None)


def one_statement(queries: Sequence[Any]) -> bool:
    """Whether these queries are answered by a single statement (which needs no transaction of its own)."""
    return len(queries) == 1 and type(queries[0]) not in SEVERAL_STATEMENTS


def apply(cx: Cx, item: Any) -> Any:
    try:
        handler = HANDLERS[type(item)]
    except KeyError:
        raise TypeError(f"the PostgreSQL store has no handler for {type(item).__name__}") from None
    return handler(cx, item)


def resolve(answers: Sequence[Any]) -> list[Any]:
    return [a.result() if isinstance(a, Later) else a for a in answers]
