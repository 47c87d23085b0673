"""agentd behind PgBouncer (Debian's package, 1.18 here): session and transaction pool modes.

Each test starts its own pgbouncer (testkit/pgbouncer.py) in front of the session's PostgreSQL server.
Before issue 17 both modes refused agentd at connect ("unsupported startup parameter: options"), and
in transaction mode psycopg's server-side prepared statements clashed between clients.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from agentd.errors import StoreError
from agentd.store.postgres import PostgresBackend, PostgresStore
from agentd.store.queries import Runs
from testkit.pgbouncer import PgBouncer, find_pgbouncer
from testkit.postgres import PostgresServer
from tests.test_store_contract import turn

pytestmark = pytest.mark.skipif(
    find_pgbouncer() is None, reason="no pgbouncer binary (Debian's `pgbouncer` package; .ci/run installs it)"
)
Bouncers = Callable[..., PgBouncer]


@pytest.fixture
def bouncer(postgres_server: PostgresServer) -> Iterator[Bouncers]:
    with contextlib.ExitStack() as stack:
        yield lambda mode, **kw: stack.enter_context(PgBouncer(postgres_server, pool_mode=mode, **kw))


@pytest.fixture
async def daemons() -> AsyncIterator[Callable[..., Any]]:
    async with contextlib.AsyncExitStack() as stack:

        async def open_daemon(url: str, name: str, **kw: Any) -> PostgresStore:
            backend = await stack.enter_async_context(PostgresBackend(url, daemon=name, **kw))
            store = backend.store("bot")
            await store.open()
            return store

        yield open_daemon


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def turns(stores: list[PostgresStore], conversations: int, each: int) -> list[str]:
    """`each` turns on every conversation from every store at once, each under its claim."""

    async def one_conversation(store: PostgresStore, key: str, n: int) -> None:
        for i in range(each):
            async with store.claim(key) as claim:
                assert claim.thread is not None
                await store.write(
                    turn(claim.thread.thread_id, claim.thread.next_seq, f"{n}-{i}", "ok", key=key)
                )

    await asyncio.gather(
        *(
            one_conversation(store, f"webhook:c{c}", n)
            for n, store in enumerate(stores)
            for c in range(conversations)
        )
    )
    return [r["id"] for r in await stores[0].read(Runs())]


async def test_session_pooling_serves_agentd_out_of_the_box(
    bouncer: Bouncers, daemons: Callable[..., Any], postgres_url: str
) -> None:
    # session mode: a server connection per client connection (each daemon: 4 threads and its listener)
    url = bouncer("session", pool_size=12).url(database_of(postgres_url))
    a, b = await daemons(url, "a", threads=4), await daemons(url, "b", threads=4)
    runs = await turns([a, b], conversations=3, each=4)
    assert len(runs) == 2 * 3 * 4


async def test_transaction_pooling_with_its_setting_has_no_prepared_statement_clashes(
    bouncer: Bouncers, daemons: Callable[..., Any], postgres_url: str, postgres_server: PostgresServer
) -> None:
    database = database_of(postgres_url)
    # what the refusal below asks the operator to do, before any server connection is made
    postgres_server.psql(f'ALTER ROLE "postgres" IN DATABASE "{database}" SET search_path = agentd')
    url = bouncer("transaction").url(database)
    a = await daemons(url, "a", pooler="transaction")
    b = await daemons(url, "b", pooler="transaction")
    # 4 server connections for 16 client connections: each statement lands on any of them; every
    # statement runs more than psycopg's prepare threshold (5) times
    runs = await turns([a, b], conversations=4, each=5)
    assert len(runs) == 2 * 4 * 5


async def test_transaction_pooling_without_the_servers_search_path_is_refused_with_what_to_do(
    bouncer: Bouncers, daemons: Callable[..., Any], postgres_url: str
) -> None:
    url = bouncer("transaction").url(database_of(postgres_url))
    with pytest.raises(StoreError, match=r"store.pooler is transaction.*ALTER ROLE \"postgres\" IN DATABASE"):
        await daemons(url, "a", pooler="transaction")
