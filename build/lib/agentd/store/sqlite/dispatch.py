"""Which SQL answers which query or write: each module registers its functions with `handles`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[[sqlite3.Connection, Any], Any])
HANDLERS: dict[type, Callable[[sqlite3.Connection, Any], Any]] = {}


def handles(kind: type) -> Callable[[F], F]:
    """Register the decorated function as the SQLite answer to `kind` (a Query or Write class)."""

    def register(fn: F) -> F:
        if kind in HANDLERS:
            raise RuntimeError(f"two SQLite handlers for {kind.__name__}")
        HANDLERS[kind] = fn
        return fn

    return register


def apply(conn: sqlite3.Connection, item: Any) -> Any:
    try:
        handler = HANDLERS[type(item)]
    except KeyError:
        raise TypeError(f"the SQLite store has no handler for {type(item).__name__}") from None
    return handler(conn, item)
