"""The SQLite backend: one file per agent, every file served by one shared store thread."""

from agentd.store.sqlite.executor import StoreExecutor
from agentd.store.sqlite.store import SoleOwner, SqliteStore

__all__ = ["SoleOwner", "SqliteStore", "StoreExecutor"]
