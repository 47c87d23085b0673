"""What a SQLite handler is: a function of the connection and a query or write, registered with
`handles` by the SQL module that holds it (agentd/store/sqlite/dispatch.py lists those modules)."""

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
