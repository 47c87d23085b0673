"""The store seam: what the engine and the memory strategies need from wherever data lives.

One main pair of methods: `read(query)` and `write(*ops)`, where queries
(`agentd.store.queries`) and writes (`agentd.store.writes`) are plain data. A
backend (SQLite files today, PostgreSQL for several daemons) maps each to its
own SQL; nothing above this package ever sees SQL or a connection.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from agentd.store.claims import Claim, KnownThread
from agentd.store.queries import Query
from agentd.store.writes import Write

T = TypeVar("T")


class Store(Protocol):
    """One agent's data. `label` names it in messages (a file path, a database and agent)."""

    @property
    def label(self) -> str: ...

    @property
    def shared(self) -> bool:
        """True when other daemons write the same data: caches are checked at each claim."""
        ...

    async def open(self) -> list[str]:
        """Ready the agent's data; returns the migrations applied now.

        A backend may defer opening and migrating to the first read or write (the
        SQLite one does: a daemon with thousands of agents touches none of their
        files at startup); then that call raises what opening would have, StoreError
        (NewerSchema when the data was written by a newer agentd), and this returns [].
        """
        ...

    async def close(self) -> None: ...

    async def read(self, query: Query[T]) -> T:
        """Answer one query."""
        ...

    async def read_many(self, *queries: Query[Any]) -> list[Any]:
        """Answer several queries in one hop, results in order."""
        ...

    async def write(self, *ops: Write[Any]) -> list[Any]:
        """Apply the ops in order in one transaction; returns their results in order.

        Returns only once committed. If an op raises, nothing of the batch is kept
        and the error is raised here.
        """
        ...

    def claim(
        self, conversation_key: str, purpose: str = "turn", known: KnownThread | None = None
    ) -> AbstractAsyncContextManager[Claim]:
        """Take the conversation for one event (see agentd.store.claims); the engine holds its own
        per-conversation lock first, so a process has at most one claim per conversation at a time.

        `purpose` "memory" is a separate claim on the same conversation for after-run memory work
        that runs beside the turns (one at a time, across daemons too). `known`: where this process's
        cached copy of the active thread stands; a shared store may then bring in the claim what that
        copy misses (`Claim.tail`), and a single-owner store ignores it.
        """
        ...


class Leases(Protocol):
    """Named leases among the daemons sharing a store: a singleton (a bot connection) runs on the one
    daemon holding its lease; a lease not renewed within its time passes to another daemon."""

    async def acquire(self, name: str, holder: str, ttl: float) -> int | None:
        """The lease's token when `holder` now holds it (new, renewed or taken over), else None."""
        ...

    async def renew(self, name: str, holder: str, token: int, ttl: float) -> bool:
        """Extend a held lease; False when it was lost (expired and taken)."""
        ...

    async def release(self, name: str, holder: str, token: int) -> None: ...

    async def holder(self, name: str) -> str | None:
        """Who holds the lease now (None: nobody, or it expired)."""
        ...


@runtime_checkable
class KnowsIfAbsent(Protocol):
    """A store that can tell, without opening anything, that nothing was ever stored in it.

    Optional (checked by type): the SQLite store has no file yet. Reads across many
    agents (the daemon-wide audit trail) skip such a store instead of creating it.
    """

    def absent(self) -> bool: ...


async def write_one(store: Store, op: Write[T]) -> T:
    """Apply one write in its own transaction and return its result as the op's type says
    (`store.write(*ops)` returns a list of results, one per op, so it cannot type them).

    A free function, not a method: every Store (both backends, and the wrappers around them) has it
    for nothing."""
    [result] = await store.write(op)
    return cast(T, result)
