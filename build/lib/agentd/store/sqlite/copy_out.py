"""Reading an agent's SQLite file for `agentd store copy` (agentd/store/copy_tables.py): every table, in
the file's order, from one snapshot.

The file is read through a read-only connection inside one read transaction, so a daemon still
writing it cannot make the tables disagree with each other (what it writes later is not copied). A
file from an older agentd is first migrated, as `agentd run` would at its first use; one from a
newer agentd is refused. Its audit chain is verified in that snapshot before anything is copied.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import TracebackType

from agentd.errors import NewerSchema, StoreError
from agentd.store.audit_chain import Verdict, verify_chain
from agentd.store.copy_tables import Row, Table
from agentd.store.queries import AuditHead, AuditTrail
from agentd.store.sqlite.audit import audit_head, audit_trail
from agentd.store.sqlite.migrations import MIGRATIONS, migrate
from agentd.store.sqlite.store import connect


class AgentFile:
    """A context manager: `with AgentFile(path) as source: source.rows(table)`."""

    def __init__(self, path: Path):
        self.path = path
        self.migrated: list[str] = []  # migrations applied to the file before it was read
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> AgentFile:
        try:
            self.migrated = self._bring_up_to_date()
            conn = connect(self.path, readonly=True)
            conn.execute("BEGIN")  # (deferred: the snapshot is taken at the first read, below)
            conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
        except sqlite3.Error as e:
            raise StoreError(f"cannot read {self.path}: {e}") from e
        self._conn = conn
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _bring_up_to_date(self) -> list[str]:
        peek = connect(self.path, readonly=True)
        try:
            done = {row[0] for row in peek.execute("SELECT name FROM schema_migrations")}
        finally:
            peek.close()
        known = {name for name, _ in MIGRATIONS}
        if done - known:
            raise NewerSchema(
                f"{self.path} was written by a newer agentd (migrations {', '.join(sorted(done - known))} "
                "are unknown to this one): upgrade agentd to copy it; nothing was copied"
            )
        if done == known:
            return []
        conn = connect(self.path)
        try:
            return migrate(conn)
        finally:
            conn.close()

    def audit_verdict(self, chain: str) -> Verdict:
        """The file's audit chain walked from its first event to its head, as `agentd audit verify`
        walks it (in the snapshot the rows are read from)."""
        if self._conn is None:
            raise StoreError(f"{self.path} is not open")
        try:
            events = audit_trail(self._conn, AuditTrail(0, -1))  # (LIMIT -1: all of them)
            head = audit_head(self._conn, AuditHead())
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: reading audit: {e}") from e
        return verify_chain(chain, events, head)

    def rows(self, table: Table) -> list[Row]:
        """Every row of `table`: its columns in the plan's order, in the file's order."""
        if self._conn is None:
            raise StoreError(f"{self.path} is not open")
        sql = f"SELECT {', '.join(table.columns)} FROM {table.name} ORDER BY {', '.join(table.reading_order)}"
        try:
            return self._conn.execute(sql).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: reading {table.name}: {e}") from e
