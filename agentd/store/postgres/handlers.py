"""What a PostgreSQL handler is and gets, registered with `handles` by the SQL module that holds it
(agentd/store/postgres/dispatch.py lists those modules and applies them).

A handler gets a `Cx` (the connection, in pipeline mode inside the batch's transaction, and the
agent's id that scopes every statement) and the item. It sends its statements and returns its answer;
when the answer is in rows not received yet it returns a `Later` that reads them once the batch's
statements have all been sent and answered, so a batch of several handlers costs one round trip.
A handler that needs a row before it can go on (or refuse, raising RowMissing) reads it at once,
which costs a round trip of its own: only rare writes do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg

T = TypeVar("T")
HANDLERS: dict[type, Callable[[Cx, Any], Any]] = {}
SEVERAL_STATEMENTS: set[type] = set()
READS_MIDWAY: dict[type, Callable[[Any], bool]] = {}


@dataclass(frozen=True, slots=True)
class Cx:
    conn: psycopg.Connection[Any]
    agent_id: int

    def run(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.conn.execute(sql, params)  # type: ignore[arg-type]  # (our SQL is literal text)


class Later(Generic[T]):
    """An answer read after the batch's round trip."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], T]):
        self._read = read

    def result(self) -> T:
        return self._read()


def handles(
    kind: type, *, statements: int = 1, reads_midway: Callable[[Any], bool] | None = None
) -> Callable[[Callable[[Cx, Any], Any]], Callable[[Cx, Any], Any]]:
    """Register the decorated function as the PostgreSQL answer to `kind` (a Query or Write class).

    A query answered by more than one statement says so (they then share one snapshot); a write
    that reads a row before its batch is over says when (`reads_midway(op)`): its batch is then an
    explicit transaction, since reading ends the implicit one a pipeline otherwise is."""

    def register(fn: Callable[[Cx, Any], Any]) -> Callable[[Cx, Any], Any]:
        if kind in HANDLERS:
            raise RuntimeError(f"two PostgreSQL handlers for {kind.__name__}")
        HANDLERS[kind] = fn
        if statements > 1:
            SEVERAL_STATEMENTS.add(kind)
        if reads_midway is not None:
            READS_MIDWAY[kind] = reads_midway
        return fn

    return register


def rows(cur: psycopg.Cursor[Any]) -> Later[list[tuple[Any, ...]]]:
    return Later(cur.fetchall)


def rowcount(cur: psycopg.Cursor[Any]) -> Later[int]:
    return Later(lambda: cur.rowcount)
