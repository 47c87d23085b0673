"""The store seam's contract, run against both backends: every query and write, results and order.

Each test gets a store of agent `bot` on SQLite (its own file) and on PostgreSQL (a fresh database
of the test server); `stores` opens more agents beside it (another file, or another agent's rows in
the same database).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentd.errors import StoreError
from agentd.messages import Message
from agentd.store import job_queries, job_writes, queries, writes
from agentd.store.base import Store, write_one
from agentd.store.postgres import PostgresBackend
from agentd.store.postgres.dispatch import HANDLERS as PG_HANDLERS
from agentd.store.queries import (
    ActiveThread,
    ApprovalById,
    AuditEvents,
    AuditHead,
    AuditTrail,
    ConversationPartitions,
    Conversations,
    DeliverySeen,
    EpisodeCounts,
    EpisodePartitions,
    Episodes,
    EpisodesById,
    FactPartitions,
    Facts,
    FollowingEpisodes,
    KeywordSearch,
    LayerStateOf,
    Memories,
    MemoryKeys,
    MemoryValue,
    MessageCounts,
    MessagesPage,
    NeighbourEpisodes,
    OpenApprovals,
    PendingEpisodes,
    PersonConversations,
    Query,
    Runs,
    RunTotals,
    ThreadHeader,
    ThreadHistory,
    VectorChanges,
    Vectors,
)
from agentd.store.records import ApprovalRecord, AuditRecord, LayerState, NewEpisode, RunRecord, StoredMessage
from agentd.store.sqlite import SqliteStore, StoreExecutor
from agentd.store.sqlite.dispatch import HANDLERS as SQLITE_HANDLERS
from agentd.store.writes import (
    AppendAudit,
    ApplyCompaction,
    ArchiveThread,
    CloseApproval,
    CommitTurn,
    DecideApproval,
    DeleteConversation,
    DeleteFact,
    DeleteMemory,
    DeletePartitionEpisodes,
    DeleteTranscript,
    Delivery,
    EnsureIdentity,
    ErasePerson,
    InsertApproval,
    InsertEpisodes,
    InsertRun,
    PruneDeliveries,
    PruneEpisodes,
    PutLayerState,
    RecordDelivery,
    RowMissing,
    SetVectors,
    UpsertFact,
    UpsertMemory,
    Write,
)

KEY = "webhook:c1"
T0 = 1_700_000_000.0
OpenStore = Callable[[str], Awaitable[Store]]
RUN_IDS = itertools.count(1)


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Opens the store of an agent by name, on the test's backend; all closed afterwards."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "sqlite":
            executor = StoreExecutor()
            stack.callback(executor.shutdown)

            def build(name: str) -> Store:
                return SqliteStore(tmp_path / f"{name}.sqlite", executor, daemon="d1")
        else:
            url = request.getfixturevalue("postgres_url")
            backend = await stack.enter_async_context(PostgresBackend(url, daemon="d1"))
            build = backend.store

        async def open_store(name: str) -> Store:
            store = build(name)
            await store.open()
            stack.push_async_callback(store.close)
            return store

        yield open_store


@pytest.fixture
async def store(stores: OpenStore) -> Store:
    return await stores("bot")


def run(run_id: str, key: str | None = KEY, trigger: str = "message", at: float = T0, **kw: Any) -> RunRecord:
    return RunRecord(run_id, key, trigger, "m/x", kw.pop("status", "ok"), at, **kw)


def said(seq: int, text: str, role: str = "user", run_id: str | None = "r") -> StoredMessage:
    message = Message.user(text, "u1") if role == "user" else Message.assistant(text)
    return StoredMessage(seq, message, run_id)


def turn(thread_id: int | None, first_seq: int, *texts: str, key: str = KEY, **kw: Any) -> CommitTurn:
    """A turn of alternating user/assistant messages from `first_seq`."""
    messages = [said(first_seq + i, t, "user" if i % 2 == 0 else "assistant") for i, t in enumerate(texts)]
    run_record = kw.pop("run_record", None) or run(f"run-{next(RUN_IDS)}", key)
    return CommitTurn(
        key, thread_id, messages, run_record, kw.pop("usage", None), kw.pop("delivery", None), T0 + first_seq
    )


async def one(store: Store, op: Write[Any]) -> Any:
    return await write_one(store, op)


def episode(partition: str, text: str, key: str | None = KEY, **kw: Any) -> NewEpisode:
    return NewEpisode(partition, key, text, kw.pop("at", T0), **kw)


VEC = b"\x00\x00\x80?" * 4  # float32 [1, 1, 1, 1]


# -- the seam is complete --------------------------------------------------------------------


@pytest.mark.parametrize("handlers", [SQLITE_HANDLERS, PG_HANDLERS], ids=["sqlite", "postgres"])
def test_every_query_and_write_has_a_handler(handlers: dict[type, Any]) -> None:
    kinds = [
        obj
        for module in (queries, writes, job_queries, job_writes)
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Query | Write) and obj not in (Query, Write)
    ]
    assert len(kinds) > 30
    assert [k.__name__ for k in kinds if k not in handlers] == []


# -- threads and messages ----------------------------------------------------------------------


async def test_a_turn_makes_the_thread_then_appends_to_it(store: Store) -> None:
    thread_id = await one(store, turn(None, 1, "hello", "hi there"))
    assert isinstance(thread_id, int)
    assert await one(store, turn(thread_id, 3, "how are you", "fine", usage=(120, True))) == thread_id
    header = await store.read(ThreadHeader(KEY))
    assert (header.id, header.next_seq, header.summary, header.messages) == (thread_id, 5, None, [])
    assert (header.last_input_tokens, header.last_tokens_estimated) == (120, True)
    thread = await store.read(ActiveThread(KEY))
    assert [(m.seq, m.message.role, m.message.text) for m in thread.messages] == [
        (1, "user", "hello"),
        (2, "assistant", "hi there"),
        (3, "user", "how are you"),
        (4, "assistant", "fine"),
    ]
    assert thread.messages[0].message.user_id == "u1" and thread.messages[0].run_id == "r"
    assert thread.chars == sum(m.message.char_count() for m in thread.messages)
    page = await store.read(MessagesPage(thread_id, 1, 2))
    assert [m.seq for m in page] == [2, 3]
    assert [m.seq for m in await store.read(MessagesPage(thread_id, 2, None))] == [3, 4]
    assert [r["thread_id"] for r in await store.read(Runs(KEY))] == [thread_id, thread_id]


async def test_a_long_turn_keeps_every_message_in_order(store: Store) -> None:
    texts = [f"step {i}" for i in range(12)]  # (a turn with many tool steps)
    thread_id = await one(store, turn(None, 1, *texts))
    assert [m.message.text for m in (await store.read(ActiveThread(KEY))).messages] == texts
    assert (await store.read(ThreadHeader(KEY))).next_seq == 13 and thread_id is not None


async def test_a_turn_without_messages_records_its_run_only(store: Store) -> None:
    no_messages = CommitTurn(KEY, None, [], run("r0"), None, None, T0)
    assert await store.write(no_messages) == [None]
    assert (await store.read(ThreadHeader(KEY))).id is None
    assert [r["id"] for r in await store.read(Runs())] == ["r0"]


async def test_an_unknown_conversation_has_an_empty_thread(store: Store) -> None:
    header, thread, counts = await store.read_many(
        ThreadHeader("nope"), ActiveThread("nope"), MessageCounts("nope")
    )
    assert (header.id, header.next_seq, thread.messages) == (None, 1, [])
    assert counts == {"messages": 0, "compacted": 0, "archived_threads": 0}


async def test_compaction_hides_messages_and_keeps_their_rows(store: Store) -> None:
    thread_id = await one(store, turn(None, 1, "a", "b", "c", "d", usage=(900, False)))
    assert await one(store, ApplyCompaction(thread_id, 2, "first summary", "rc1", T0)) == 2
    assert await one(store, ApplyCompaction(thread_id, 3, "second summary", "rc2", T0)) == 1
    header = await store.read(ThreadHeader(KEY))
    assert (header.summary, header.next_seq, header.last_input_tokens, header.last_tokens_estimated) == (
        "second summary",
        5,
        None,
        False,
    )
    thread = await store.read(ActiveThread(KEY))
    assert [m.seq for m in thread.messages] == [4]
    assert thread.chars == len("second summary") + thread.messages[0].message.char_count()
    assert [m.seq for m in await store.read(MessagesPage(thread_id, 0, None))] == [4]
    assert await store.read(MessageCounts(KEY)) == {"messages": 4, "compacted": 3, "archived_threads": 0}


async def test_archive_starts_a_new_thread_and_reset_empties_one(store: Store) -> None:
    first = await one(store, turn(None, 1, "a", "b"))
    await one(store, ArchiveThread(first, T0))
    assert (await store.read(ThreadHeader(KEY))).id is None
    second = await one(store, turn(None, 1, "c", "d", usage=(50, False)))
    assert second != first
    await one(store, PutLayerState(second, "state", LayerState({"x": 1}, 2), T0))
    assert await store.read(MessageCounts(KEY)) == {"messages": 2, "compacted": 0, "archived_threads": 1}
    assert await one(store, DeleteTranscript(second)) == 2
    header = await store.read(ThreadHeader(KEY))
    assert (header.id, header.next_seq, header.last_input_tokens) == (second, 1, None)
    assert await store.read(LayerStateOf(second, "state")) == LayerState()
    assert (await store.read(ActiveThread(KEY))).messages == []


async def test_thread_history_keeps_archived_threads_and_compacted_messages(store: Store) -> None:
    first = await one(store, turn(None, 1, "a", "b"))
    await one(store, ArchiveThread(first, T0))
    second = await one(store, turn(None, 1, "c", "d"))
    await one(store, ApplyCompaction(second, 1, "summary", "rc", T0))
    await one(store, turn(None, 1, "x", key="webhook:other"))
    history = await store.read(ThreadHistory(KEY))
    assert [(t["id"], t["conversation_key"], t["status"]) for t in history] == [
        (first, KEY, "archived"),
        (second, KEY, "active"),
    ]
    assert history[1]["messages"] == [
        {"seq": 1, "role": "user", "user_id": "u1", "run_id": "r", "compacted": True},
        {"seq": 2, "role": "assistant", "user_id": None, "run_id": "r", "compacted": False},
    ]
    assert [len(t["messages"]) for t in history] == [2, 2]
    assert [t["conversation_key"] for t in await store.read(ThreadHistory())] == [KEY, KEY, "webhook:other"]
    await one(store, DeleteTranscript(second))
    assert [len(t["messages"]) for t in await store.read(ThreadHistory(KEY))] == [2, 0]
    assert await store.read(ThreadHistory("nope")) == []


async def test_conversations_most_recently_active_first(store: Store) -> None:
    await store.write(turn(None, 1, "old", key="webhook:old"), turn(None, 5, "new", key="webhook:new"))
    listed = await store.read(Conversations())
    assert [(c["conversation_key"], c["messages"]) for c in listed] == [
        ("webhook:new", 1),
        ("webhook:old", 1),
    ]
    assert listed[0]["last_message_at"] == T0 + 5
    assert [c["conversation_key"] for c in await store.read(Conversations(limit=1))] == ["webhook:new"]
    assert [c["conversation_key"] for c in await store.read(Conversations(limit=5, offset=1))] == [
        "webhook:old"
    ]


async def test_a_conversation_is_deleted_with_every_thread_and_an_audit_row(store: Store) -> None:
    first = await one(store, turn(None, 1, "a", "b"))
    await one(store, ArchiveThread(first, T0))
    second = await one(store, turn(None, 1, "c", "d", "e"))
    await one(store, PutLayerState(second, "state", LayerState({"x": 1}, 2), T0))
    await one(store, turn(None, 1, "elsewhere", key="webhook:other"))
    assert await one(store, DeleteConversation("bot", KEY, "admin", T0)) == {"threads": 2, "messages": 5}
    assert (await store.read(ThreadHeader(KEY))).id is None
    assert await store.read(MessageCounts(KEY)) == {"messages": 0, "compacted": 0, "archived_threads": 0}
    assert [m.message.text for m in (await store.read(ActiveThread("webhook:other"))).messages] == [
        "elsewhere"
    ]
    [event] = await store.read(AuditEvents(kind="conversation"))
    assert (event["action"], event["data"], event["daemon"]) == (
        "delete",
        {"threads": 2, "messages": 5, "by": "admin"},
        "d1",
    )
    assert await one(store, DeleteConversation("bot", KEY, "admin", T0)) == {"threads": 0, "messages": 0}
    assert len(await store.read(AuditEvents(kind="conversation"))) == 1  # nothing went: no audit row
    assert len(await store.read(Runs(KEY))) == 2  # runs stay: they are the trail


def approval(approval_id: str, at: float = T0) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id,
        KEY,
        "r1",
        "files__write",
        "files",
        {"path": "/x", "token": "s"},
        {"path": "/x"},
        "webhook:u1",
        ["webhook:boss"],
        at,
        at + 600,
        state={"messages": [1, 2], "step": 3},
    )


async def test_approvals_wait_are_decided_once_and_closed(store: Store) -> None:
    await store.write(InsertApproval(approval("a1")), InsertApproval(approval("a2", T0 + 1)))
    assert [a.id for a in await store.read(OpenApprovals())] == ["a1", "a2"]
    assert await store.read(ApprovalById("a1")) == approval("a1")
    assert await store.read(ApprovalById("nope")) is None
    await store.write(DecideApproval("a1", "approved", "webhook:boss", T0 + 5))
    with pytest.raises(RowMissing, match="a1"):  # decided already: the whole batch is refused
        await store.write(
            UpsertMemory("", "kept?", "no", None, T0), DecideApproval("a1", "refused", "x", T0 + 6)
        )
    assert await store.read(MemoryKeys()) == {}
    await store.write(CloseApproval("a1"))
    decided = await store.read(ApprovalById("a1"))
    assert decided is not None
    assert (decided.status, decided.decided_by, decided.decided_at, decided.state) == (
        "approved",
        "webhook:boss",
        T0 + 5,
        None,
    )
    assert [a.id for a in await store.read(OpenApprovals())] == ["a2"]


async def test_layer_state_round_trips_as_written(store: Store) -> None:
    thread_id = await one(store, turn(None, 1, "a"))
    assert await store.read(LayerStateOf(thread_id, "state")) == LayerState()
    data = {"zeta": 1, "alpha": {"b": [1, 2], "a": None}, "text": "é ✓"}
    await one(store, PutLayerState(thread_id, "state", LayerState(data, 7), T0))
    got = await store.read(LayerStateOf(thread_id, "state"))
    assert (got.data, list(got.data), list(got.data["alpha"]), got.upto_seq, got.updated_at) == (
        data,
        ["zeta", "alpha", "text"],  # key order kept (it is what prompts show)
        ["b", "a"],
        7,
        T0,
    )
    await one(store, PutLayerState(thread_id, "state", LayerState({"v": 2}, 9), T0 + 1))
    assert (await store.read(LayerStateOf(thread_id, "state"))).data == {"v": 2}


# -- runs, audit, deliveries -------------------------------------------------------------------


async def test_runs_newest_kept_oldest_first_and_their_totals(store: Store) -> None:
    await store.write(
        InsertRun(run("a", at=T0, input_tokens=10, output_tokens=1)),
        InsertRun(run("b", at=T0, status="error", error="boom", input_tokens=5)),  # same time: written order
        InsertRun(run("c", key="webhook:other", trigger="compaction", at=T0 + 1, tokens_estimated=True)),
    )
    assert [r["id"] for r in await store.read(Runs())] == ["a", "b", "c"]
    assert [r["id"] for r in await store.read(Runs(limit=2))] == ["b", "c"]
    assert [r["id"] for r in await store.read(Runs(KEY))] == ["a", "b"]
    c = (await store.read(Runs("webhook:other")))[0]
    assert (c["tokens_estimated"], c["daemon"], c["trigger"]) == (True, "d1", "compaction")
    assert await store.read(RunTotals()) == {
        "message": {"runs": 2, "errors": 1, "input_tokens": 15, "output_tokens": 1},
        "compaction": {"runs": 1, "errors": 0, "input_tokens": 0, "output_tokens": 0},
    }
    assert set(await store.read(RunTotals(KEY))) == {"message"}


async def test_audit_events_newest_kept_oldest_first_with_filters(store: Store) -> None:
    await store.write(
        AppendAudit(
            "bot",
            [
                AuditRecord("memory", "remember", KEY, "r1", {"key": "city"}),
                AuditRecord("command", "new", KEY),
            ],
            T0,
        )
    )
    await store.write(AppendAudit("other", [AuditRecord("config", "loaded", data={"n": [1, 2]})], T0 + 5))
    events = await store.read(AuditEvents())
    assert [(e["agent"], e["kind"], e["action"]) for e in events] == [
        ("bot", "memory", "remember"),
        ("bot", "command", "new"),
        ("other", "config", "loaded"),
    ]
    assert events[0]["data"] == {"key": "city"} and events[0]["daemon"] == "d1"
    assert events[0]["run_id"] == "r1" and events[0]["conversation_key"] == KEY
    assert [e["action"] for e in await store.read(AuditEvents(agent="bot"))] == ["remember", "new"]
    assert [e["action"] for e in await store.read(AuditEvents(kind="config"))] == ["loaded"]
    assert [e["action"] for e in await store.read(AuditEvents(since=T0 + 1))] == ["loaded"]
    assert [e["action"] for e in await store.read(AuditEvents(limit=2))] == ["new", "loaded"]


async def test_deliveries_are_remembered_once_and_pruned_by_age(store: Store) -> None:
    delivery = Delivery("discord", "m1", KEY)
    await store.write(turn(None, 1, "hi", delivery=delivery))
    assert await store.read(DeliverySeen("discord", "m1"))
    assert not await store.read(DeliverySeen("discord", "m2"))
    assert not await store.read(DeliverySeen("slack", "m1"))
    await store.write(RecordDelivery(delivery, "again", T0 + 100))  # a duplicate is ignored, not an error
    await store.write(RecordDelivery(Delivery("discord", "m2", KEY), None, T0 + 100))
    assert await one(store, PruneDeliveries(T0 + 50)) == 1
    seen = await store.read_many(DeliverySeen("discord", "m1"), DeliverySeen("discord", "m2"))
    assert seen == [False, True]


# -- persistent memory, identity, facts --------------------------------------------------------


async def test_memories_upsert_list_and_delete(store: Store) -> None:
    assert (
        await store.write(
            UpsertMemory("", "b", "1", None, T0),
            UpsertMemory("", "B", "2", None, T0),
            UpsertMemory("", "_x", "3", None, T0),
            UpsertMemory("", "a", "4", "r1", T0),
            UpsertMemory("user:u1", "city", "Lisbon", None, T0),
        )
        == [True] * 5
    )
    assert await one(store, UpsertMemory("", "a", "44", "r2", T0 + 1)) is False
    keys = await store.read(MemoryKeys())
    assert keys == {"": ["B", "_x", "a", "b"], "user:u1": ["city"]}  # byte order, as SQLite sorts
    assert await store.read_many(MemoryValue("", "a"), MemoryValue("", "nope"), MemoryValue("", "city")) == [
        "44",
        None,
        None,
    ]
    mine = await store.read(Memories("user:u1"))
    assert mine == [
        {"scope": "user:u1", "key": "city", "value": "Lisbon", "created_at": T0, "updated_at": T0}
    ]
    a = next(m for m in await store.read(Memories()) if m["key"] == "a")
    assert (a["created_at"], a["updated_at"]) == (T0, T0 + 1)
    assert await store.write(DeleteMemory("", "a"), DeleteMemory("", "a")) == [True, False]
    assert (await store.read(MemoryKeys()))[""] == ["B", "_x", "b"]


async def test_a_refusing_op_rolls_its_whole_batch_back(store: Store) -> None:
    with pytest.raises(RowMissing, match="nope"):
        await store.write(
            UpsertMemory("", "kept?", "no", None, T0),
            turn(None, 1, "hi"),
            DeleteMemory("", "nope", must_exist=True),
        )
    keys, runs, header = await store.read_many(MemoryKeys(), Runs(), ThreadHeader(KEY))
    assert (keys, runs, header.id) == ({}, [], None)
    assert await store.write(UpsertMemory("", "k", "v", None, T0)) == [True]  # and the store still works


async def test_a_batch_that_fails_keeps_nothing_of_what_it_had_sent(store: Store) -> None:
    await store.write(InsertRun(run("taken")))
    with pytest.raises(StoreError):  # the database refuses the second op: a duplicate run id
        await store.write(UpsertMemory("", "first", "v", None, T0), InsertRun(run("taken")))
    with pytest.raises(StoreError):  # the driver refuses the second op before sending it
        await store.write(
            UpsertMemory("", "first", "v", None, T0), UpsertMemory("", "bad", object(), None, T0)
        )  # type: ignore[arg-type]
    assert await store.read(MemoryKeys()) == {}
    assert [r["id"] for r in await store.read(Runs())] == ["taken"]


async def test_identity_keeps_the_first_value_of_each_key(store: Store) -> None:
    assert await one(store, EnsureIdentity({"agent": "bot", "created_at": "1"})) == {
        "agent": "bot",
        "created_at": "1",
    }
    assert await one(store, EnsureIdentity({"created_at": "2", "extra": "x"})) == {
        "agent": "bot",
        "created_at": "1",
        "extra": "x",
    }


async def test_facts_newer_wins_and_list_newest_first(store: Store) -> None:
    results = await store.write(
        UpsertFact("user:u1", "city", "Lisbon", 0.8, "said", "r1", T0),
        UpsertFact("user:u1", "city", "Porto", 0.9, "said again", "r2", T0 + 10),
        UpsertFact("user:u1", "city", "Faro", 0.9, None, "late", T0 + 5),  # older than the row: kept
        UpsertFact("user:u1", "pet", "cat", 1.0, None, None, T0 + 10),
        UpsertFact("user:u2", "city", "Braga", 1.0, None, None, T0),
    )
    assert results == ["created", "updated", "kept", "created", "created"]
    facts = await store.read(Facts("user:u1"))
    assert [
        (f.key, f.value, f.confidence, f.source, f.created_at, f.updated_at, f.run_id) for f in facts
    ] == [
        ("city", "Porto", 0.9, "said again", T0, T0 + 10, "r2"),  # ties on updated_at: by key
        ("pet", "cat", 1.0, None, T0 + 10, T0 + 10, None),
    ]
    assert [f.key for f in await store.read(Facts("user:u1", limit=1))] == ["city"]
    assert await store.write(DeleteFact("user:u1", "pet"), DeleteFact("user:u1", "pet")) == [True, False]
    assert [f.value for f in await store.read(Facts("user:u2"))] == ["Braga"]
    assert await store.read(FactPartitions()) == ["user:u1", "user:u2"]


# -- episodes ----------------------------------------------------------------------------------


async def test_episodes_insert_embed_late_and_count(store: Store) -> None:
    ids = await one(
        store,
        InsertEpisodes(
            [
                episode("user:u1", "User: I moved to Lisbon", embedder="e1", vector=VEC, importance=0.5),
                episode("user:u1", "User: where is my cat?", at=T0 + 1),
                episode("user:u2", "User: hello", key="webhook:c2", embedder="e0", vector=VEC, at=T0 + 2),
            ]
        ),
    )
    assert ids == sorted(ids) and len(set(ids)) == 3
    pending = await store.read(PendingEpisodes("user:u1"))
    assert [(e.id, e.text, e.embedder, e.created_at) for e in pending] == [
        (ids[1], "User: where is my cat?", None, T0 + 1)
    ]
    other = b"\x00\x00\x00@" * 4
    await one(store, SetVectors("e1", [(ids[1], VEC), (ids[0], other)]))  # an embedded one keeps its vector
    vectors = await store.read(Vectors("user:u1", "e1"))
    assert [(v.id, v.vector, v.asks, v.importance) for v in vectors] == [
        (ids[0], VEC, False, 0.5),
        (ids[1], VEC, True, 1.0),
    ]
    assert await store.read(PendingEpisodes("user:u1")) == []
    found = await store.read(EpisodesById([ids[2], ids[0], 999_999]))
    assert set(found) == {ids[0], ids[2]}
    assert (found[ids[2]].partition, found[ids[2]].conversation_key, found[ids[2]].embedder) == (
        "user:u2",
        "webhook:c2",
        "e0",
    )
    assert await store.read(EpisodesById([])) == {}
    assert await store.read_many(
        EpisodeCounts("user:u1", "e1"), EpisodeCounts("user:u2", "e1"), EpisodeCounts("user:u2", None)
    ) == [
        {"total": 2, "embedded_current": 2, "embedded_other": 0, "pending": 0},
        {"total": 1, "embedded_current": 0, "embedded_other": 1, "pending": 0},
        {"total": 1, "embedded_current": 0, "embedded_other": 1, "pending": 0},
    ]
    assert await store.read(EpisodePartitions()) == ["user:u1", "user:u2"]
    listed = await store.read(Episodes("user:u1"))
    assert [(e.id, e.text, e.embedder) for e in listed] == [
        (ids[0], "User: I moved to Lisbon", "e1"),
        (ids[1], "User: where is my cat?", "e1"),
    ]
    assert await store.read(Episodes("user:u3")) == []
    assert await store.read_many(ConversationPartitions(KEY), ConversationPartitions("webhook:c2")) == [
        ["user:u1"],
        ["user:u2"],
    ]


async def test_vector_changes_from_zero_list_every_vector(store: Store) -> None:
    ids = await one(
        store,
        InsertEpisodes(
            [
                episode("p", "one", embedder="e", vector=VEC),
                episode("p", "two"),
                episode("p", "x?", embedder="e", vector=VEC),
            ]
        ),
    )
    every = await store.read(VectorChanges("p", "e", 0))
    assert [(v.id, v.asks) for v in every.added] == [(ids[0], False), (ids[2], True)]
    assert every.removed == [] and every.complete


async def test_keyword_search_within_a_partition_best_first(store: Store) -> None:
    ids = await one(
        store,
        InsertEpisodes(
            [
                episode(
                    "user:u1", "User: my sister is moving to Lisbon next spring", embedder="e", vector=VEC
                ),
                episode("user:u1", "User: Lisbon has great food"),
                episode("user:u1", "User: nothing to see here", embedder="e", vector=VEC),
                episode("user:u1", "User: I moved to Lisbon", embedder="other", vector=VEC),
                episode("user:u2", "User: I moved to Lisbon too", embedder="e", vector=VEC),
            ]
        ),
    )
    hits = await store.read(KeywordSearch("user:u1", "e", ["moved", "lisbon"], 10))
    # stems match ("moved" finds "moving"); both words beat one; another embedder's and another
    # person's episodes never come back; an episode not embedded yet does
    assert [h.id for h in hits] == [ids[0], ids[1]]
    assert all(h.bm25 < 0 for h in hits) and hits[0].bm25 < hits[1].bm25
    assert (hits[0].embedded, hits[1].embedded, hits[0].partition, hits[0].text) == (
        True,
        False,
        "user:u1",
        "User: my sister is moving to Lisbon next spring",
    )
    assert hits[1].episode().conversation_key == KEY
    every = await store.read(KeywordSearch("user:u1", None, ["lisbon"], 10))
    assert sorted(h.id for h in every) == [ids[0], ids[1], ids[3]]
    assert len(await store.read(KeywordSearch("user:u1", None, ["lisbon"], 2))) == 2
    assert await store.read(KeywordSearch("user:u1", "e", ["absent"], 10)) == []
    assert await store.read(KeywordSearch("user:u1", "e", [], 10)) == []
    assert await store.read(KeywordSearch("user:u1", "e", ["it's", 'say "hi"', "back\\slash"], 10)) == []


async def test_neighbours_and_replies_of_one_conversation(store: Store) -> None:
    rows = []
    for i in range(5):
        rows.append(episode("user:u1", f"mine {i}", embedder="e", vector=VEC))
        rows.append(episode("user:u1", f"elsewhere {i}", key="webhook:c2", embedder="e", vector=VEC))
    rows.append(episode("user:u1", "not embedded yet"))
    rows.append(episode("user:u1", "another embedder", embedder="x", vector=VEC))
    ids = await one(store, InsertEpisodes(rows))
    mine = ids[0:10:2]
    anchors = await store.read(EpisodesById([mine[2], mine[4]]))
    near = await store.read(NeighbourEpisodes([anchors[mine[2]], anchors[mine[4]]], 1, "e"))
    assert [[e.id for e in side] for side in near] == [[mine[1], mine[3]], [mine[3], ids[10]]]
    near = await store.read(NeighbourEpisodes([anchors[mine[2]]], 5, "e"))
    assert [e.text for e in near[0]] == ["mine 0", "mine 1", "mine 3", "mine 4", "not embedded yet"]
    replies = await store.read(FollowingEpisodes([mine[0], mine[4], ids[11]], "e"))
    assert {k: v.text for k, v in replies.items()} == {mine[0]: "mine 1", mine[4]: "not embedded yet"}
    assert await store.read(FollowingEpisodes([], "e")) == {}


async def test_retention_by_age_then_by_count_is_audited_with_counts(store: Store) -> None:
    ids = await one(
        store,
        InsertEpisodes(
            [
                episode("p", "ancient", at=T0 - 100),
                episode("p", "minor", at=T0, importance=0.1),
                episode("p", "old but major", at=T0, importance=0.9),
                episode("p", "new but minor", at=T0 + 1, importance=0.1),
                episode("p", "major", at=T0 + 2, importance=0.9),
                episode("q", "ancient elsewhere", at=T0 - 100),
            ]
        ),
    )
    pruned = await one(store, PruneEpisodes("bot", "p", 2, T0 - 50, T0 + 10))
    assert (sorted(pruned.ids), pruned.by_age, pruned.by_count) == (sorted([ids[0], ids[1], ids[3]]), 1, 2)
    left = await store.read(EpisodesById(ids))
    assert sorted(e.text for e in left.values()) == ["ancient elsewhere", "major", "old but major"]
    audit = await store.read(AuditEvents(kind="memory"))
    assert [(a["action"], a["data"], a["ts"], a["agent"], a["daemon"]) for a in audit] == [
        ("prune_episodes", {"partition": "p", "by_age": 1, "by_count": 2}, T0 + 10, "bot", "d1")
    ]
    nothing = await one(store, PruneEpisodes("bot", "p", 5, None, T0 + 11))
    assert (nothing.ids, nothing.by_age, nothing.by_count) == ([], 0, 0)
    assert len(await store.read(AuditEvents(kind="memory"))) == 1  # nothing went: no audit row


async def test_one_persons_episodes_are_deleted_on_request(store: Store) -> None:
    await one(
        store, InsertEpisodes([episode("user:u1", "a"), episode("user:u1", "b"), episode("user:u2", "c")])
    )
    assert await one(store, DeletePartitionEpisodes("bot", "user:u1", "admin", T0)) == 2
    assert await store.read(EpisodePartitions()) == ["user:u2"]
    [event] = await store.read(AuditEvents(kind="memory"))
    assert (event["action"], event["data"], event["daemon"]) == (
        "delete_episodes",
        {"partition": "user:u1", "deleted": 2, "by": "admin"},
        "d1",
    )


# -- agents ------------------------------------------------------------------------------------


async def test_two_agents_never_see_each_others_rows(stores: OpenStore) -> None:
    a, b = await stores("alpha"), await stores("beta")
    for store, word in ((a, "alpha"), (b, "beta")):
        thread_id = await one(store, turn(None, 1, f"{word} says hi", delivery=Delivery("d", "e1", KEY)))
        await store.write(
            PutLayerState(thread_id, "state", LayerState({"who": word}), T0),
            UpsertMemory("", "name", word, None, T0),
            UpsertFact("user:u1", "name", word, 1.0, None, None, T0),
            InsertEpisodes([episode("user:u1", f"{word} episode", embedder="e", vector=VEC)]),
            AppendAudit(word, [AuditRecord("memory", "remember")], T0),
            EnsureIdentity({"agent": word}),
        )
    for store, word in ((a, "alpha"), (b, "beta")):
        thread = await store.read(ActiveThread(KEY))
        assert [m.message.text for m in thread.messages] == [f"{word} says hi"]
        assert thread.id is not None
        assert (await store.read(LayerStateOf(thread.id, "state"))).data == {"who": word}
        assert await store.read(MemoryValue("", "name")) == word
        assert [f.value for f in await store.read(Facts("user:u1"))] == [word]
        assert await store.read(FactPartitions()) == ["user:u1"]
        assert [e.text for e in await store.read(Episodes("user:u1"))] == [f"{word} episode"]
        assert [len(t["messages"]) for t in await store.read(ThreadHistory())] == [1]
        hits = await store.read(KeywordSearch("user:u1", "e", ["episode"], 10))
        assert [h.text for h in hits] == [f"{word} episode"]
        assert [v.id for v in await store.read(Vectors("user:u1", "e"))] == [h.id for h in hits]
        assert [e["agent"] for e in await store.read(AuditEvents())] == [word]
        assert len(await store.read(Runs())) == 1 and len(await store.read(Conversations())) == 1
        assert await store.read(MemoryKeys()) == {"": ["name"]}
    mine, theirs = await a.read(ThreadHeader(KEY)), await b.read(ThreadHeader(KEY))
    assert theirs.id is not None
    if theirs.id != mine.id:  # (one database: its ids are shared; files number their own)
        assert await a.read(MessagesPage(theirs.id, 0, None)) == []
        [their_episode] = await b.read(KeywordSearch("user:u1", "e", ["episode"], 1))
        assert await a.read(EpisodesById([their_episode.id])) == {}
    assert await a.write(PruneDeliveries(T0 + 10)) == [1]
    assert await b.read(DeliverySeen("d", "e1"))  # pruning one agent's deliveries left the other's


# -- the audit chain and a person's data ---------------------------------------------------------


async def test_the_audit_trail_pages_in_seq_order_from_a_time_and_names_its_head(store: Store) -> None:
    assert await store.read(AuditHead()) is None
    records = [AuditRecord("memory", f"a{i}", KEY, None, {"i": i}) for i in range(5)]
    for i, record in enumerate(records):
        await store.write(AppendAudit("bot", [record], T0 + i))
    trail = await store.read(AuditTrail())
    assert [(e["seq"], e["action"], e["ts"]) for e in trail] == [(i + 1, f"a{i}", T0 + i) for i in range(5)]
    assert trail[0]["prev_hash"] == "0" * 64 and trail[1]["prev_hash"] == trail[0]["hash"]
    assert set(trail[0]["salts"]) == {"conversation_key", "data.i"} and trail[0]["erased"] == {}
    assert [e["seq"] for e in await store.read(AuditTrail(after_seq=2, limit=2))] == [3, 4]
    assert [e["seq"] for e in await store.read(AuditTrail(since=T0 + 3))] == [4, 5]
    assert await store.read(AuditHead()) == (5, trail[-1]["hash"])
    shown = await store.read(AuditEvents())
    assert [(e["seq"], e["hash"], e["prev_hash"]) for e in shown] == [
        (e["seq"], e["hash"], e["prev_hash"]) for e in trail
    ]


async def test_a_persons_conversations_theirs_shared_and_named_by_key(store: Store) -> None:
    def by(user: str, seq: int, key: str, thread_id: int | None = None) -> CommitTurn:
        message = StoredMessage(seq, Message.user(f"{user} speaks", user), f"r-{user}-{key}-{seq}")
        return CommitTurn(key, thread_id, [message], run(f"r-{user}-{key}-{seq}", key), None, None, T0 + seq)

    await one(store, by("ana", 1, "discord:dm:ana"))
    room = await one(store, by("ana", 1, "discord:room"))
    await one(store, by("bob", 2, "discord:room", room))
    await one(
        store,
        CommitTurn("telegram:dm:ana", None, [], run("r-nothing-kept", "telegram:dm:ana"), None, None, T0),
    )
    await one(store, by("bob", 1, "webhook:ana"))  # a key that happens to end in her id: not hers
    found = await store.read(PersonConversations("ana"))
    assert found == {"theirs": ["discord:dm:ana", "telegram:dm:ana"], "shared": ["discord:room"]}
    assert await store.read(PersonConversations("nobody")) == {"theirs": [], "shared": []}


async def test_an_erasure_keeps_to_the_conversations_named_and_records_one_event(store: Store) -> None:
    for key in ("webhook:one", "webhook:two"):
        await one(store, CommitTurn(key, None, [said(1, "I am ana")], run(f"r-{key}", key), None, None, T0))
    await one(store, UpsertMemory("user:u1", "city", "Porto", None, T0))
    subject = {"scrypt": "00", "salt": "00", "n": 2, "r": 1, "p": 1}
    erase = ErasePerson("bot", "u1", subject, "test", T0 + 5, conversations=["webhook:one"])
    counts = await one(store, erase)
    assert counts == {"conversations": 1, "messages": 1, "threads": 1, "runs": 1, "memories": 1}
    assert (await store.read(ThreadHeader("webhook:one"))).id is None
    assert (await store.read(ThreadHeader("webhook:two"))).id is not None  # not held: left
    [event] = await store.read(AuditEvents(kind="person"))
    assert event["data"] == {"subject": subject, "counts": counts, "by": "test"} and event["daemon"] == "d1"
    assert await one(store, ErasePerson("bot", "nobody", subject, "test", T0)) == {}
    assert len(await store.read(AuditEvents(kind="person"))) == 1  # nothing went: no event
