"""Everything SQL: one SQLite file per agent, served by one shared store thread."""

from agentd.store.db import AgentStore, StoreExecutor

__all__ = ["AgentStore", "StoreExecutor"]
