"""Stop asks between daemons sharing one PostgreSQL (agentd/store/postgres/stop_asks.py), at the store:
addressed to the daemon holding the conversation's turn claim, taken once, answered, withdrawn when
nobody answers in time; woken by LISTEN/NOTIFY directly, by polling behind PgBouncer in transaction
mode (where LISTEN cannot work). The whole path, with two `agentd run` daemons, is in
tests/test_control_daemons.py."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentd.store.postgres import PostgresBackend
from agentd.store.postgres.stop_asks import LISTENING_POLL_S
from agentd.store.stop_asks import StopAnswer, StopAsk
from testkit.pgbouncer import PgBouncer, find_pgbouncer
from testkit.postgres import PostgresServer

KEY = "webhook:c"


@pytest.fixture
async def backends() -> AsyncIterator[Callable[..., Any]]:
    async with contextlib.AsyncExitStack() as stack:

        async def open_backend(url: str, name: str, **kw: Any) -> PostgresBackend:
            backend = await stack.enter_async_context(PostgresBackend(url, daemon=name, **kw))
            await backend.store("bot").open()  # (the agent's row)
            return backend

        yield open_backend


async def ask_answer_withdraw(a: PostgresBackend, b: PostgresBackend) -> float:
    """B asks for the turn A holds; A takes it once and answers. Returns how long B waited for the answer."""
    assert await b.stop_asks.ask("bot", KEY, "api", "http:x") is None  # nobody holds it: nothing to ask
    store = a.store("bot")
    await store.open()
    async with store.claim(KEY):
        assert await a.stop_asks.ask("bot", KEY, "api", "http:x") is None  # (its own turn: stopped locally)
        taking = asyncio.ensure_future(a.stop_asks.taken(30))
        await asyncio.sleep(0.1)  # A waits for asks before B asks
        ask = await b.stop_asks.ask("bot", KEY, "api", "http:x")
        assert ask is not None
        assert await asyncio.wait_for(taking, 10) == [StopAsk(ask, "bot", KEY, "api", "http:x", "b")]
        assert await a.stop_asks.taken(0.1) == []  # handed out once
        waiting = asyncio.ensure_future(b.stop_asks.answer_of(ask, 30))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await a.stop_asks.answer(ask, "run-1")
        assert await asyncio.wait_for(waiting, 10) == StopAnswer("run-1", "a")
        waited = time.monotonic() - started
        # an ask nobody takes in time is withdrawn: the holder never acts on it
        late = await b.stop_asks.ask("bot", KEY, "command", None)
        assert late is not None
        assert await b.stop_asks.answer_of(late, 0.3) is None
        assert await a.stop_asks.taken(0.1) == []
    return waited


async def test_asks_reach_the_holder_at_once_over_listen_notify(
    backends: Callable[..., Any], postgres_url: str
) -> None:
    a, b = await backends(postgres_url, "a"), await backends(postgres_url, "b")
    await asyncio.wait_for(a.wakeups.listening.wait(), 10)
    await asyncio.wait_for(b.wakeups.listening.wait(), 10)
    waited = await ask_answer_withdraw(a, b)
    assert waited < LISTENING_POLL_S / 2  # the notification woke it, not the safety-net poll


@pytest.mark.skipif(find_pgbouncer() is None, reason="no pgbouncer binary (Debian's `pgbouncer` package)")
async def test_asks_are_polled_behind_a_transaction_mode_pooler(
    backends: Callable[..., Any], postgres_url: str, postgres_server: PostgresServer
) -> None:
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.psql(f'ALTER ROLE "postgres" IN DATABASE "{database}" SET search_path = agentd')
    with PgBouncer(postgres_server, pool_mode="transaction") as bouncer:
        url = bouncer.url(database)
        a = await backends(url, "a", pooler="transaction")
        b = await backends(url, "b", pooler="transaction")
        assert not a.wakeups.listening.is_set()  # (no LISTEN there)
        assert await ask_answer_withdraw(a, b) < 2
