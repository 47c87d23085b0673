"""Claims across daemons on one PostgreSQL database: exclusion, arrival order, leases, the fence.

Each "daemon" is its own PostgresBackend (its own threads, connections, listener and heartbeat)
on the same database, in this one test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentd.errors import LeaseLost
from agentd.store.base import write_one
from agentd.store.claims import Claim, KnownThread, current_fence
from agentd.store.postgres import PostgresBackend, PostgresStore
from agentd.store.postgres.claims import TAIL_CAP
from agentd.store.postgres.connection import connect
from agentd.store.queries import MemoryKeys, Runs
from agentd.store.records import RunRecord
from agentd.store.writes import CommitTurn, InsertRun, UpsertMemory
from testkit.waiting import wait_until
from tests.test_store_contract import T0, turn

KEY = "webhook:c1"
Daemons = Callable[..., Any]


@pytest.fixture
async def daemon(postgres_url: str) -> AsyncIterator[Daemons]:
    """Opens a 'daemon' on the test's database and its store of agent `bot`: `await daemon("a")`."""
    async with contextlib.AsyncExitStack() as stack:

        async def open_daemon(name: str, agent: str = "bot", **kw: Any) -> PostgresStore:
            backend = await stack.enter_async_context(PostgresBackend(postgres_url, daemon=name, **kw))
            store = backend.store(agent)
            await store.open()
            return store

        yield open_daemon


async def hold(store: PostgresStore, order: list[str], name: str, release: asyncio.Event, **kw: Any) -> Claim:
    async with store.claim(KEY, **kw) as claim:
        order.append(name)
        await release.wait()
        return claim


@dataclass
class Queue:
    """`a` holds the conversation until `gate` is set; `b` waits behind it."""

    order: list[str]
    gate: asyncio.Event
    holder: asyncio.Task[Claim]
    waiter: asyncio.Task[Claim]

    async def let_go(self) -> None:
        self.gate.set()
        await self.holder
        await wait_until(lambda: self.order == ["a", "b"], "b to have it after a", 10)

    async def stop_waiter(self) -> None:
        self.waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.waiter


async def queue(a: PostgresStore, b: PostgresStore) -> Queue:
    order: list[str] = []
    gate = asyncio.Event()
    holder = asyncio.create_task(hold(a, order, "a", gate))
    await wait_until(lambda: order == ["a"], "a to hold the conversation", 10)
    waiter = asyncio.create_task(hold(b, order, "b", asyncio.Event()))
    await wait_until(lambda: queued(b) == 1, "b to take its ticket", 10)
    return Queue(order, gate, holder, waiter)


def run(run_id: str) -> RunRecord:
    return RunRecord(run_id, KEY, "command", None, "ok", T0)


async def test_a_free_conversation_is_granted_with_its_thread_mark(daemon: Daemons) -> None:
    a = await daemon("a")
    async with a.claim(KEY) as empty:
        assert empty.token is not None and empty.memories_version == 0
        assert empty.thread is not None and (empty.thread.thread_id, empty.thread.next_seq) == (None, 1)
        assert current_fence.get() is not None and current_fence.get().token == empty.token  # type: ignore[union-attr]
        thread_id = await write_one(a, turn(None, 1, "hi", "hello"))
        await a.write(UpsertMemory("", "k", "v", None, T0))
    assert current_fence.get() is None
    async with a.claim(KEY) as claim:
        assert claim.token != empty.token
        assert claim.thread is not None and (claim.thread.thread_id, claim.thread.next_seq) == (thread_id, 3)
        assert claim.memories_version == 1


async def test_one_daemon_at_a_time_in_arrival_order(daemon: Daemons) -> None:
    a, b, c = await daemon("a"), await daemon("b"), await daemon("c")
    order: list[str] = []
    gates = {name: asyncio.Event() for name in "abc"}
    first = asyncio.create_task(hold(a, order, "a", gates["a"]))
    await wait_until(lambda: order == ["a"], "a to hold the conversation", 10)
    second = asyncio.create_task(hold(b, order, "b", gates["b"]))
    await wait_until(lambda: queued(b) == 1, "b to take its ticket", 10)
    third = asyncio.create_task(hold(c, order, "c", gates["c"]))
    await wait_until(lambda: queued(c) == 1, "c to take its ticket", 10)
    await asyncio.sleep(0.3)
    assert order == ["a"]  # b and c wait while a holds it
    gates["a"].set()
    await first
    await wait_until(lambda: order == ["a", "b"], "b, the older ticket, to get it", 10)
    await asyncio.sleep(0.3)
    assert order == ["a", "b"]
    gates["b"].set()
    gates["c"].set()
    await asyncio.gather(second, third)
    assert order == ["a", "b", "c"]


def queued(store: PostgresStore) -> int:
    return len(store._backend.claims._tickets)  # type: ignore[attr-defined]  # (its tickets, held or waiting)


async def test_a_release_wakes_the_next_daemon_at_once(daemon: Daemons) -> None:
    a, b = await daemon("a"), await daemon("b")
    b._backend.claims.poll_s = 60  # type: ignore[attr-defined]  # only the notification can wake it in time
    await wait_until(lambda: b._backend.wakeups.listening.is_set(), "b to listen", 10)  # type: ignore[attr-defined]
    waiting = await queue(a, b)
    await waiting.let_go()
    await waiting.stop_waiter()


async def test_the_next_message_of_a_burst_does_not_jump_the_queue(daemon: Daemons) -> None:
    a, b = await daemon("a"), await daemon("b")
    order: list[str] = []
    gates = {name: asyncio.Event() for name in ("a", "b", "a again")}
    first = asyncio.create_task(hold(a, order, "a", gates["a"]))
    await wait_until(lambda: order == ["a"], "a to hold the conversation", 10)
    second = asyncio.create_task(hold(b, order, "b", gates["b"]))
    await wait_until(lambda: queued(b) == 1, "b to take its ticket", 10)
    gates["a"].set()
    await first
    # a's next message comes at once, before its release has run: it gives the ticket back itself
    third = asyncio.create_task(hold(a, order, "a again", gates["a again"]))
    await wait_until(lambda: order == ["a", "b"], "b, which came first, to have it", 10)
    gates["b"].set()
    gates["a again"].set()
    await asyncio.gather(second, third)
    assert order == ["a", "b", "a again"]


async def test_a_holder_that_stops_renewing_is_taken_over_and_its_writes_refused(daemon: Daemons) -> None:
    stalled = await daemon("stalled", lease_s=0.5, heartbeat_s=3600)  # never renews: as if hung
    other = await daemon("other", lease_s=0.5)
    held, taken_over = asyncio.Event(), asyncio.Event()

    async def stalled_turn() -> None:
        async with stalled.claim(KEY):
            await stalled.write(InsertRun(run("before")))
            held.set()
            await taken_over.wait()  # (the model call that hung)
            await stalled.write(InsertRun(run("stale")), UpsertMemory("", "stale", "x", None, T0))

    stuck = asyncio.create_task(stalled_turn())
    await held.wait()
    started = time.monotonic()
    async with other.claim(KEY) as taken:
        waited = time.monotonic() - started
        assert taken.token is not None
        await other.write(InsertRun(run("by-other")))
        taken_over.set()
        with pytest.raises(LeaseLost, match="another daemon took this conversation over"):
            await stuck
    assert 0.2 < waited < 5
    assert [r["id"] for r in await other.read(Runs())] == ["before", "by-other"]
    assert await other.read(MemoryKeys()) == {}  # nothing of the refused batch


async def test_a_renewed_lease_outlives_its_length(daemon: Daemons) -> None:
    a, b = await daemon("a", lease_s=0.6), await daemon("b", lease_s=0.6)
    waiting = await queue(a, b)
    await asyncio.sleep(2.0)  # three leases long: a's heartbeat keeps it
    assert waiting.order == ["a"]
    await waiting.let_go()
    await waiting.stop_waiter()


async def test_a_write_inside_a_claim_held_past_its_lease_still_commits_when_nobody_took_it(
    daemon: Daemons,
) -> None:
    a = await daemon("a", lease_s=0.3, heartbeat_s=3600)
    async with a.claim(KEY):
        await asyncio.sleep(0.6)  # expired, but no other daemon wanted the conversation
        await a.write(InsertRun(run("late but alone")))
    assert [r["id"] for r in await a.read(Runs())] == ["late but alone"]


async def test_a_waiter_that_gives_up_does_not_block_the_queue(daemon: Daemons) -> None:
    a, b, c = await daemon("a"), await daemon("b"), await daemon("c")
    waiting = await queue(a, b)
    await waiting.stop_waiter()
    await wait_until(lambda: queued(b) == 0, "b's ticket to be given back", 10)
    waiting.gate.set()
    await waiting.holder
    started = time.monotonic()
    async with c.claim(KEY):
        assert time.monotonic() - started < 5  # not behind b's abandoned ticket (a lease is 15 s)


async def test_work_started_inside_a_claim_writes_unfenced_once_the_claim_is_over(daemon: Daemons) -> None:
    a = await daemon("a")
    claim_over = asyncio.Event()

    async def later() -> None:  # (it inherits the claim's context, fence and all)
        await claim_over.wait()
        await a.write(InsertRun(run("after the claim")))

    async with a.claim(KEY):
        task = asyncio.create_task(later())
    claim_over.set()
    await task  # the released ticket's fence is not checked: this write is under no claim
    assert [r["id"] for r in await a.read(Runs())] == ["after the claim"]


async def test_turn_and_memory_claims_of_a_conversation_are_separate(daemon: Daemons) -> None:
    a, b = await daemon("a"), await daemon("b")
    async with a.claim(KEY), b.claim(KEY, purpose="memory") as memory:
        assert memory.token is not None
        await b.write(InsertRun(run("memory work")))


async def test_the_fence_guards_only_its_own_agents_writes(daemon: Daemons) -> None:
    bot = await daemon("a")
    helper = bot._backend.store("helper")  # type: ignore[attr-defined]
    await helper.open()
    async with bot.claim(KEY):
        await helper.write(InsertRun(run("helper's own")))  # another agent's write carries no fence
    assert [r["id"] for r in await helper.read(Runs())] == ["helper's own"]


async def test_a_first_turn_from_two_daemons_makes_one_thread(daemon: Daemons) -> None:
    a, b = await daemon("a"), await daemon("b")

    async def first_message(store: PostgresStore, text: str) -> int:
        async with store.claim(KEY) as claim:
            assert claim.thread is not None
            thread_id = await write_one(
                store,
                CommitTurn(
                    KEY,
                    claim.thread.thread_id,
                    turn(None, claim.thread.next_seq, text).messages,
                    run(text),
                    None,
                    None,
                    T0,
                ),
            )
            return int(thread_id)

    ids = await asyncio.gather(first_message(a, "from a"), first_message(b, "from b"))
    assert ids[0] == ids[1]


# -- named leases -----------------------------------------------------------------------------------


async def test_named_leases_one_holder_until_released_or_lapsed(postgres_url: str) -> None:
    async with (
        PostgresBackend(postgres_url, daemon="a") as one,
        PostgresBackend(postgres_url, daemon="b") as two,
    ):
        token = await one.leases.acquire("discord:bot", "a", ttl_s=0.5)
        assert token is not None
        assert await two.leases.acquire("discord:bot", "b", ttl_s=0.5) is None
        assert await one.leases.acquire("discord:bot", "a", ttl_s=0.5) == token  # renewing keeps the token
        assert await one.leases.renew("discord:bot", "a", token, ttl_s=0.5)
        assert await two.leases.holder("discord:bot") == "a"
        await asyncio.sleep(0.7)  # a stops renewing: it lapses
        assert await two.leases.holder("discord:bot") is None
        taken = await two.leases.acquire("discord:bot", "b", ttl_s=5)
        assert taken is not None and taken > token
        assert not await one.leases.renew("discord:bot", "a", token, ttl_s=5)  # a finds out it lost it
        await one.leases.release("discord:bot", "a", token)  # a stale release changes nothing
        assert await two.leases.holder("discord:bot") == "b"
        await two.leases.release("discord:bot", "b", taken)
        assert await one.leases.acquire("discord:bot", "a", ttl_s=5) is not None


# -- what a grant brings for a cached copy of the thread (the engine's side: test_postgres_claim_tail.py)


async def test_a_claim_brings_exactly_what_the_known_copy_misses(daemon: Daemons) -> None:
    a = await daemon("a")
    async with a.claim(KEY) as first:
        assert first.tail is None  # nothing known
        thread_id = await write_one(a, turn(None, 1, "hi", "hello", usage=(123, True)))
    known = KnownThread(thread_id, 0, 2)
    async with a.claim(KEY, known=known) as claim:
        assert claim.tail is not None and claim.tail.from_seq == 2
        assert [(m.seq, m.message.text) for m in claim.tail.messages] == [(2, "hello")]
        assert (claim.tail.last_input_tokens, claim.tail.last_tokens_estimated) == (123, True)
    async with a.claim(KEY, known=KnownThread(thread_id, 0, 3)) as current:
        assert current.tail is None  # the copy misses nothing


async def test_a_tail_of_the_cap_is_sent_and_a_longer_one_is_not(daemon: Daemons) -> None:
    a = await daemon("a")
    async with a.claim(KEY):
        thread_id = await write_one(a, turn(None, 1, *[f"m{i}" for i in range(TAIL_CAP + 1)]))
    async with a.claim(KEY, known=KnownThread(thread_id, 0, 2)) as claim:
        assert claim.tail is not None and [m.seq for m in claim.tail.messages] == list(range(2, TAIL_CAP + 2))
    async with a.claim(KEY, known=KnownThread(thread_id, 0, 1)) as claim:
        assert claim.thread is not None and claim.thread.next_seq == TAIL_CAP + 2
        assert claim.tail is None


@pytest.mark.parametrize(
    "known",
    [
        pytest.param(lambda thread_id: KnownThread(thread_id, 1, 2), id="another-version"),
        pytest.param(lambda thread_id: KnownThread(thread_id + 1, 0, 2), id="another-thread"),
    ],
)
async def test_a_claim_sends_no_tail_for_a_copy_of_another_thread_or_version(
    daemon: Daemons, known: Any
) -> None:
    a = await daemon("a")
    async with a.claim(KEY):
        thread_id = await write_one(a, turn(None, 1, "hi", "hello", "more"))
    async with a.claim(KEY, known=known(thread_id)) as claim:
        assert claim.thread is not None and claim.thread.next_seq == 4
        assert claim.tail is None


async def test_a_daemon_of_the_version_before_still_claims_in_turn_during_a_rolling_upgrade(
    daemon: Daemons, postgres_url: str
) -> None:
    """Migration 0006 adds the claim that brings a missing tail beside the one before it: a daemon not
    yet upgraded (its 7-argument call, sent here by hand) keeps its place in the same queue."""
    new = await daemon("new")
    async with new.claim(KEY):
        pass  # (the agent's row exists now)
    # a claim's ticket is given back without waiting: the old daemon's claim below must find it gone
    releasing = new._backend.claims._releasing  # type: ignore[attr-defined]
    await wait_until(lambda: not releasing, "the new daemon's ticket to be given back", 10)
    agent_id = new._require()  # type: ignore[attr-defined]
    old_version_claim = (
        "SELECT ticket_id, is_granted FROM agentd_claim(%s, %s, 'turn', 'old', 15, NULL, NULL)"
    )
    with connect(postgres_url) as old:
        ticket, granted = old.execute(old_version_claim, (agent_id, KEY)).fetchone()  # type: ignore[misc]
        assert granted
        order: list[str] = []
        waiter = asyncio.create_task(hold(new, order, "new", asyncio.Event()))
        await wait_until(lambda: queued(new) == 1, "the upgraded daemon to take its ticket", 10)
        await asyncio.sleep(0.3)
        assert order == []  # behind the old daemon's ticket
        old.execute("SELECT agentd_release(%s)", (ticket,))
        await wait_until(lambda: order == ["new"], "the upgraded daemon to have it next", 10)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
