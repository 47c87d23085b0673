"""One agent's rows of the shared PostgreSQL database, behind the store seam.

`read` and `read_many` answer in one round trip and one snapshot; `write` applies a batch in one
transaction (one round trip unless an op needs a row mid-way), checking first, when a claim of this
agent is held in the caller's context, that its lease still is (`current_fence`): a daemon that lost
the conversation while stalled gets LeaseLost and nothing of the batch is kept. `claim` is the
conversation's lease (agentd/store/postgres/claims.py). Every statement is scoped by the agent's id.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

from agentd.errors import StoreError
from agentd.store.claims import Claim, KnownThread, current_fence
from agentd.store.postgres.claims import ClaimQueue
from agentd.store.postgres.executor import PgExecutor, read_batch, write_batch
from agentd.store.queries import Query
from agentd.store.writes import Write, stamped

T = TypeVar("T")


class Database(Protocol):
    """What a store uses of its backend (agentd/store/postgres/backend.py)."""

    label: str
    daemon: str
    executor: PgExecutor
    claims: ClaimQueue
    applied: list[str]

    async def agent_id(self, name: str, *, create: bool) -> int: ...


class PostgresStore:
    # Other daemons write the same rows: the engine checks its caches against each claim.
    shared = True

    def __init__(self, backend: Database, agent: str, *, readonly: bool = False):
        self.agent = agent
        self.daemon = backend.daemon  # recorded on every run and audit event this store writes
        self._backend = backend
        self._executor = backend.executor
        self._readonly = readonly
        self._agent_id: int | None = None

    @property
    def label(self) -> str:
        return f"{self._backend.label}#{self.agent}"

    async def open(self) -> list[str]:
        """Find (or make) the agent's row; the migrations were applied when the database was opened
        (the first store to open reports them)."""
        self._agent_id = await self._backend.agent_id(self.agent, create=not self._readonly)
        applied, self._backend.applied = self._backend.applied, []
        return applied

    async def close(self) -> None:
        self._agent_id = None

    def _require(self) -> int:
        if self._agent_id is None:
            raise StoreError(f"{self.label} is not open")
        return self._agent_id

    async def read(self, query: Query[T]) -> T:
        [answer] = await self.read_many(query)
        result: T = answer
        return result

    async def read_many(self, *queries: Query[Any]) -> list[Any]:
        agent_id = self._require()
        return await self._executor.call(lambda conn: read_batch(conn, agent_id, queries), idempotent=True)

    async def write(self, *ops: Write[Any]) -> list[Any]:
        """Apply `ops` in one transaction; returns their results once committed."""
        if self._readonly:
            raise StoreError(f"{self.label} is open read-only")
        agent_id = self._require()
        fence = current_fence.get()
        if fence is not None and (fence.agent != self.agent or not self._backend.claims.holds(fence.token)):
            fence = None  # (a claim of another agent, a sub-agent's say, or one that is over)
        batch = stamped(ops, self.daemon)
        executor, holder = self._executor, self._backend.daemon

        def job(conn: Any) -> list[Any]:
            return write_batch(
                conn, agent_id, batch, fence, holder=holder, deadline=executor.server_deadline()
            )

        return await executor.commit(job)

    def claim(
        self, conversation_key: str, purpose: str = "turn", known: KnownThread | None = None
    ) -> AbstractAsyncContextManager[Claim]:
        return self._backend.claims.claim(self._require(), self.agent, conversation_key, purpose, known)
