"""Which SQL answers which query or write on PostgreSQL: each module registers its functions with `handles`.

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


def rows(cur: psycopg.Cursor[Any]) -> Later[list[tuple[Any, ...]]]:
    return Later(cur.fetchall)


def rowcount(cur: psycopg.Cursor[Any]) -> Later[int]:
    return Later(lambda: cur.rowcount)
