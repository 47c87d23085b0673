"""The PostgreSQL backend: one database for every agent, shared by several daemons."""

from agentd.store.postgres.backend import PostgresBackend
from agentd.store.postgres.store import PostgresStore

__all__ = ["PostgresBackend", "PostgresStore"]
