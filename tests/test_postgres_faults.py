"""PostgreSQL under faults (issue 17): crash recovery, restarts, a server that is down, a stalled path.

These tests own their server (testkit.postgres.PostgresServer): they stop, crash and restart it, which
the session's shared server must never see. Each "daemon" is its own PostgresBackend on the test's
database, as in test_postgres_claims.py; a stalled path is testkit.tcp_proxy.StallingProxy in front of
the server, in this test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from agentd.daemon import Daemon
from agentd.errors import LeaseLost, StoreError
from agentd.http.app import create_app
from agentd.store.postgres import PostgresBackend, PostgresStore
from agentd.store.postgres.connection import connect
from agentd.store.postgres.migrations import MIGRATIONS, migrate
from agentd.store.queries import Runs
from agentd.store.records import RunRecord
from agentd.store.writes import InsertRun
from testkit.postgres import PostgresServer
from testkit.scripted import ScriptedProvider
from testkit.tcp_proxy import StallingProxy
from testkit.waiting import wait_until
from tests.test_store_contract import T0, turn

KEY = "webhook:c1"
T = TypeVar("T")
Daemons = Callable[..., Awaitable[PostgresStore]]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """This module's own server (sync: started in the main thread, which outlives it)."""
    with PostgresServer() as pg:
        yield pg


@pytest.fixture
def database(server: PostgresServer) -> Iterator[str]:
    name = f"faults_{uuid.uuid4().hex[:12]}"
    server.create_database(name)
    yield name
    with contextlib.suppress(RuntimeError):
        server.drop_database(name)


@pytest.fixture
async def daemon(server: PostgresServer, database: str) -> AsyncIterator[Daemons]:
    """`await daemon("a", url=..., **PostgresBackend options)`: a daemon's store of agent `bot`."""
    async with contextlib.AsyncExitStack() as stack:

        async def open_daemon(name: str, url: str | None = None, **kw: Any) -> PostgresStore:
            backend = PostgresBackend(url or server.url(database), daemon=name, **kw)
            await stack.enter_async_context(backend)
            store = backend.store("bot")
            await store.open()
            return store

        yield open_daemon


def run(run_id: str) -> InsertRun:
    return InsertRun(RunRecord(run_id, KEY, "command", None, "ok", T0))


async def stored_runs(store: PostgresStore) -> list[str]:
    return [r["id"] for r in await store.read(Runs())]


async def past_broken_connections(attempt: Callable[[], Awaitable[T]], tries: int = 10) -> T:
    """`attempt()`, again while it fails on a connection the server's restart broke (not the point
    of the tests that use this: those that are, call the store directly)."""
    for _ in range(tries - 1):
        try:
            return await attempt()
        except LeaseLost:
            raise
        except StoreError:
            await asyncio.sleep(0.1)
    return await attempt()


# -- 1. fencing across crash recovery --------------------------------------------------------------


@pytest.mark.parametrize("crash", ["immediate shutdown", "kill -9"])
async def test_a_lease_held_across_crash_recovery_is_void_and_its_late_hand_back_spares_the_next(
    daemon: Daemons, server: PostgresServer, crash: str
) -> None:
    """Crash recovery empties the UNLOGGED tickets. Before migration 0007 it also restarted their
    numbering, so the next daemon got the crashed holder's ticket number back: the old holder's
    writes passed that daemon's fence and its late hand-back deleted that daemon's lease."""
    a, b = await daemon("a"), await daemon("b")
    held, b_holds, a_left = asyncio.Event(), asyncio.Event(), asyncio.Event()
    tokens: dict[str, int | None] = {}

    async def turn_on_a() -> None:
        async with a.claim(KEY) as claim:
            tokens["a"] = claim.token
            await a.write(run("a before the crash"))
            held.set()
            await b_holds.wait()
            with pytest.raises(LeaseLost):
                await past_broken_connections(lambda: a.write(run("a after the crash")))
        a_left.set()

    async def turn_on_b() -> None:
        async with contextlib.AsyncExitStack() as stack:
            claim = await past_broken_connections(lambda: stack.enter_async_context(b.claim(KEY)))
            tokens["b"] = claim.token
            b_holds.set()
            await a_left.wait()
            await asyncio.sleep(0.3)  # a's hand-back has run (or would have)
            await b.write(run("b after a left"))  # still b's lease

    on_a = asyncio.create_task(turn_on_a())
    await held.wait()
    if crash == "kill -9":
        await asyncio.to_thread(server.crash_backend)
    else:
        await server.restart_async("immediate")
    await asyncio.wait_for(asyncio.gather(on_a, turn_on_b()), 60)
    assert tokens["a"] != tokens["b"]  # a fencing token is never handed out twice
    assert await stored_runs(b) == ["a before the crash", "b after a left"]


async def test_a_ticket_number_seen_again_never_passes_another_daemons_fence(
    daemon: Daemons, server: PostgresServer, database: str
) -> None:
    """The fence, the hand-back and the renewal match the holder as well as the number: even if a
    number came back (a crash within the WAL writer's delay), it is another daemon's ticket."""
    a = await daemon("a")
    async with a.claim(KEY) as claim:
        # the ticket now is another daemon's, with the same number (what a reissued number looks like)
        server.psql(
            f"UPDATE agentd.claim_tickets SET daemon = 'b' WHERE id = {claim.token}", database=database
        )
        with pytest.raises(LeaseLost):
            await a.write(run("a with b's number"))
    await asyncio.sleep(0.5)  # a's hand-back has run: b's ticket is still there
    left = server.psql(f"SELECT daemon FROM agentd.claim_tickets WHERE id = {claim.token}", database=database)
    assert left.split() == ["b"]
    assert await stored_runs(a) == []


# -- 4. a failed hand-back is retried --------------------------------------------------------------


async def test_a_hand_back_that_failed_while_the_server_was_down_is_retried_once_it_answers(
    daemon: Daemons, server: PostgresServer
) -> None:
    """Before: the failed hand-back was only logged, and the conversation waited the whole lease."""
    a, b = await daemon("a", lease_s=60), await daemon("b", lease_s=60)
    async with a.claim(KEY):
        await a.write(run("a"))
        await asyncio.to_thread(server.halt, "fast")  # (a clean shutdown keeps the tickets)
    await asyncio.sleep(2.5)  # a's hand-back has failed meanwhile
    await server.resume_async()
    started = time.monotonic()

    async def claim_on_b() -> None:
        async with contextlib.AsyncExitStack() as stack:
            await past_broken_connections(lambda: stack.enter_async_context(b.claim(KEY)))
            await b.write(run("b"))

    await asyncio.wait_for(claim_on_b(), 20)  # not the 60 s lease
    waited = time.monotonic() - started
    print(f"b had the conversation {waited:.2f}s after the server was back (lease: 60 s)")
    assert waited < 10
    assert await stored_runs(b) == ["a", "b"]


# -- 5. a connection that died while idle ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_the_first_write_after_a_restart_is_not_lost_to_a_connection_that_died_idle(
    daemon: Daemons, server: PostgresServer, mode: str
) -> None:
    """Before: the first write on each connection after `pg_ctl restart` failed (503 to the caller)."""
    a = await daemon("a", threads=1)  # (one connection: the one that dies)
    await a.write(run("before"))
    await server.restart_async(mode)
    await a.write(run("after"))  # no retry here: the store itself sees the connection is gone
    async with a.claim(KEY):
        await a.write(run("fenced after"))
    assert await stored_runs(a) == ["before", "after", "fenced after"]


# -- 2. a stalled path ---------------------------------------------------------------------------


@pytest.fixture
async def proxy(server: PostgresServer) -> AsyncIterator[StallingProxy]:
    p = await StallingProxy(server.port).start()
    yield p
    await p.close()


def through(proxy: StallingProxy, server: PostgresServer, database: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{proxy.port}/{database}"


async def test_a_write_on_a_stalled_path_fails_within_its_deadline_and_never_commits_later(
    daemon: Daemons, server: PostgresServer, database: str, proxy: StallingProxy
) -> None:
    """Before: the write waited as long as the stall (here: until the test gave up), and once the
    path came back it committed, though its caller had long been told it failed."""
    a = await daemon("a", url=through(proxy, server, database), lease_s=2)
    async with a.claim(KEY):
        await a.write(run("before"))
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"no answer within 2s|connection timeout expired"):
            await asyncio.wait_for(a.write(run("stalled")), 15)
        failed_after = time.monotonic() - started
        await wait_until(lambda: proxy.held > 0, "the write to be held by the proxy", 5)
        proxy.resume()  # the held batch reaches the server now, after its deadline
        await wait_until(lambda: proxy.held == 0, "the proxy to pass on what it held", 5)
        await asyncio.sleep(0.5)
    assert 2.0 <= failed_after < 4.0
    assert await stored_runs(a) == ["before"]


async def test_a_turn_stalled_on_one_daemon_never_commits_after_a_newer_turn_on_another(
    daemon: Daemons, server: PostgresServer, database: str, proxy: StallingProxy
) -> None:
    """The issue's scenario: a's path stalls mid-turn, the client retries on b (which takes the
    conversation over once a's lease lapses) and sends a later turn; then a's path comes back."""
    a = await daemon("a", url=through(proxy, server, database), lease_s=2)
    b = await daemon("b", lease_s=2)
    held, a_failed = asyncio.Event(), asyncio.Event()

    async def turn_on_a() -> float:
        async with a.claim(KEY):
            await a.write(run("first"))
            held.set()
            proxy.stall()
            started = time.monotonic()
            try:
                await a.write(run("second, on a"))
            except StoreError:
                a_failed.set()
                return time.monotonic() - started
        raise AssertionError("a's write on the stalled path did not fail")

    on_a = asyncio.create_task(turn_on_a())
    await held.wait()
    failed_after = await asyncio.wait_for(on_a, 15)
    for text in ("second, retried on b", "third, on b"):
        async with b.claim(KEY):
            await b.write(run(text))
    proxy.resume()
    await wait_until(lambda: proxy.held == 0, "the proxy to pass on what it held", 5)
    await asyncio.sleep(0.5)
    assert failed_after < 4.0
    assert await stored_runs(b) == ["first", "second, retried on b", "third, on b"]


# -- restarts and crashes under load ---------------------------------------------------------------


async def test_under_load_restarts_and_crashes_lose_no_acknowledged_turn_and_keep_transcripts_whole(
    daemon: Daemons, server: PostgresServer, database: str
) -> None:
    """2 daemons, 8 writers on 4 conversations, while the server is restarted (fast), shut down
    immediately and restarted (crash recovery), and one of its processes is killed -9 (crash
    recovery again). Every acknowledged turn is stored once, each transcript has no gap or double,
    and writes are acknowledged again after every fault. (Failures during a fault are allowed:
    a turn cut by it is refused as a whole or committed as a whole.)"""
    daemons = [await daemon("a", lease_s=3), await daemon("b", lease_s=3)]
    keys = [f"webhook:c{i}" for i in range(4)]
    acked: list[tuple[str, str]] = []  # (conversation, user text)
    failed: dict[str, int] = {}
    phase = ["warm"]
    acked_in: dict[str, int] = {}
    stop = asyncio.Event()

    async def writer(n: int) -> None:
        store, key = daemons[n % 2], keys[n % 4]
        for i in range(1_000_000):
            if stop.is_set():
                return
            text = f"w{n}-{i}"
            try:
                async with store.claim(key) as claim:
                    assert claim.thread is not None
                    await store.write(
                        turn(claim.thread.thread_id, claim.thread.next_seq, text, "ok", key=key)
                    )
                acked.append((key, text))
                acked_in[phase[0]] = acked_in.get(phase[0], 0) + 1
            except StoreError as e:  # (LeaseLost included)
                failed[type(e).__name__] = failed.get(type(e).__name__, 0) + 1
                await asyncio.sleep(0.05)

    writers = [asyncio.create_task(writer(n)) for n in range(8)]
    faults: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("restart", lambda: server.restart_async("fast")),
        ("immediate", lambda: server.restart_async("immediate")),
        ("kill -9", lambda: asyncio.to_thread(server.crash_backend)),
    ]
    try:
        await asyncio.sleep(1.0)
        for name, fault in faults:
            await fault()
            phase[0] = f"after {name}"
            await wait_until(
                lambda name=name: acked_in.get(f"after {name}", 0) >= 8, f"turns after {name}", 30
            )
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*writers), 60)
    rows = server.psql(
        "SELECT t.conversation_key, m.seq, m.body FROM agentd.messages m JOIN agentd.threads t"
        " ON t.id = m.thread_id ORDER BY t.conversation_key, m.seq",
        database=database,
    ).splitlines()
    stored: dict[str, list[int]] = {}
    users: list[tuple[str, str]] = []
    for row in rows:
        key, seq, body = row.split("|", 2)
        stored.setdefault(key, []).append(int(seq))
        if '"role": "user"' in body or '"role":"user"' in body:
            users.append((key, body))
    for key, seqs in stored.items():
        assert seqs == list(range(1, len(seqs) + 1)), key  # no gap, no double
    for key, text in acked:
        assert sum(1 for k, body in users if k == key and f'"{text}"' in body) == 1, (key, text)
    print(f"acknowledged {len(acked)} turns; by phase {acked_in}; failed {failed}")


# -- 6. readiness ----------------------------------------------------------------------------------


async def test_readyz_says_not_ready_while_the_database_is_down_and_names_it_but_not_where_it_is(
    tmp_path: Path, server: PostgresServer, database: str
) -> None:
    """Before: only /healthz, which said ok throughout (a load balancer kept sending traffic), and
    the 503 of a message said "the agent's data file is unavailable" with the database's host and port."""
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "bot.yaml").write_text("model: main/m\nchannels: {webhook: {}}\nmemory: {scope: thread}\n")
    (tmp_path / "agentd.yaml").write_text(f"store: {{url: '{server.url(database)}', lease_s: 2}}\n")
    daemon = Daemon(
        folder, tmp_path / "data", reload_interval=60, providers={"main": ScriptedProvider("main")}
    )
    await daemon.start()
    transport = httpx.ASGITransport(app=create_app(daemon))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200 and ready.json() == {"ready": True, "daemon": daemon.daemon_id}
            await asyncio.to_thread(server.halt, "fast")
            try:
                not_ready = await client.get("/readyz")
                message = await client.post(
                    "/agents/bot/messages", json={"conversation_id": "c", "text": "hi"}
                )
                alive = await client.get("/healthz")
            finally:
                await server.resume_async()
            assert alive.status_code == 200  # liveness: the process runs
            assert not_ready.status_code == 503
            assert not_ready.json()["error"].startswith(
                f"not ready: the store is unavailable: PostgreSQL database '{database}'"
            )
            assert message.status_code == 503
            assert message.json()["error"].startswith(
                f"the agent's database is unavailable: PostgreSQL database '{database}'"
            )
            for answer in (not_ready, message):
                assert "127.0.0.1" not in answer.text and f":{server.port}" not in answer.text
            await wait_until_ready(client)
    finally:
        await daemon.shutdown()


async def wait_until_ready(client: httpx.AsyncClient) -> None:
    for _ in range(100):
        if (await client.get("/readyz")).status_code == 200:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("/readyz did not say ready again once the database was back")


# -- 1. rolling upgrade across migration 0007 ------------------------------------------------------


async def test_a_daemon_of_the_version_before_0007_keeps_its_lease_fence_and_hand_back(
    daemon: Daemons, server: PostgresServer, database: str
) -> None:
    """A daemon not yet upgraded (its calls sent here by hand: 7-argument claim, 3-argument fence,
    1-argument release) holds a ticket numbered by the old sequence while a new daemon migrates 0007;
    its fence still passes, its release still hands the conversation on, and the new numbers are
    larger than the old (the queue's order holds)."""
    url = server.url(database)
    with connect(url) as old:
        migrate(old, MIGRATIONS[:6])
        agent_id = old.execute(
            "INSERT INTO agents (name, created_at) VALUES ('bot', 0) RETURNING id"
        ).fetchone()[0]  # type: ignore[index]
        claim = "SELECT ticket_id, is_granted FROM agentd_claim(%s, %s, 'turn', 'old', 15, NULL, NULL)"
        ticket, granted = old.execute(claim, (agent_id, KEY)).fetchone()  # type: ignore[misc]
        assert granted
        new = await daemon("new")  # migrates 0007 now
        assert "0007_claim_fences" in server.psql(
            "SELECT name FROM agentd.schema_migrations", database=database
        )
        order: list[str] = []

        async def claim_on_new() -> None:
            async with new.claim(KEY) as taken:
                order.append("new")
                assert taken.token is not None and taken.token > ticket

        waiting = asyncio.create_task(claim_on_new())
        await asyncio.sleep(0.5)
        assert order == []  # the old daemon's lease still holds
        old.execute("SELECT agentd_check_fence(%s, %s, %s)", (ticket, agent_id, KEY))  # passes
        old.execute("SELECT agentd_release(%s)", (ticket,))
        await asyncio.wait_for(waiting, 10)
        assert order == ["new"]


async def test_a_daemon_whose_database_path_stalls_answers_503_within_its_deadline_and_is_not_ready(
    tmp_path: Path, server: PostgresServer, database: str, proxy: StallingProxy
) -> None:
    """The issue's stall, through a whole daemon: before, requests hung as long as the stall (40-45 s)
    and /healthz said ok throughout; now a message answers 503 within the deadline (lease_s: 2 s
    here), /readyz says not ready while the path is stalled and ready again once it is back."""
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "bot.yaml").write_text("model: main/m\nchannels: {webhook: {}}\nmemory: {scope: thread}\n")
    url = through(proxy, server, database)
    (tmp_path / "agentd.yaml").write_text(f"store: {{url: '{url}', lease_s: 2}}\n")
    daemon = Daemon(
        folder, tmp_path / "data", reload_interval=60, providers={"main": ScriptedProvider("main")}
    )
    await daemon.start()
    transport = httpx.ASGITransport(app=create_app(daemon))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd", timeout=60) as client:
            hello = {"conversation_id": "c", "text": "hello"}
            assert (await client.post("/agents/bot/messages", json=hello)).status_code == 200
            proxy.stall()
            started = time.monotonic()
            again = {"conversation_id": "c", "text": "again"}
            stalled = await asyncio.wait_for(client.post("/agents/bot/messages", json=again), 20)
            answered_after = time.monotonic() - started
            print(f"a message on the stalled path answered {stalled.status_code} after {answered_after:.2f}s")
            not_ready = await client.get("/readyz")
            proxy.resume()
            assert (
                stalled.status_code == 503
                and "the agent's database is unavailable" in stalled.json()["error"]
            )
            assert answered_after < 8  # (the deadline and its grace, a reconnect's bounded wait)
            assert not_ready.status_code == 503 and "no answer within 2s" in not_ready.json()["error"]
            await wait_until_ready(client)
    finally:
        await daemon.shutdown()


async def test_a_burst_on_a_stalled_path_fails_within_one_deadline_not_one_per_thread_in_turn(
    daemon: Daemons, server: PostgresServer, database: str, proxy: StallingProxy
) -> None:
    """20 writes at once on 2 threads while the path is stalled: the deadline counts from when a
    write was handed to the store, so the last of them fails as soon as the first (before: one
    deadline per pair of writes ahead of it, ~20 s)."""
    a = await daemon("a", url=through(proxy, server, database), lease_s=2, threads=2)
    await asyncio.gather(*(a.write(run(f"warm {i}")) for i in range(4)))  # (both connections made)
    proxy.stall()
    started = time.monotonic()
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(a.write(run(f"burst {i}")) for i in range(20)), return_exceptions=True), 30
    )
    slowest = time.monotonic() - started
    proxy.resume()
    print(f"20 writes on a stalled path, 2 threads: all answered within {slowest:.2f}s")
    assert all(isinstance(o, StoreError) for o in outcomes)
    assert slowest < 4.0
