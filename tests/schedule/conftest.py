"""The store fixtures of the store contract (one agent's store, on SQLite and on PostgreSQL)."""

from tests.test_store_contract import store, stores

__all__ = ["store", "stores"]
