"""The jobs tables in both backends: the next fire off the index, a fire recorded once, a delivery's
attempts, a person's jobs exported and erased."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.store.base import Store, write_one
from agentd.store.job_queries import (
    DueDeliveries,
    DueJobs,
    JobById,
    JobDeliveries,
    JobFires,
    Jobs,
    JobTotals,
    NextDeliveryAt,
    NextFireAt,
    PersonJobs,
)
from agentd.store.job_records import DeliveryRecord, FireRecord, JobRecord
from agentd.store.job_writes import (
    CompleteFire,
    DeletePersonJobs,
    DeliveryAttempt,
    InsertDelivery,
    InsertJob,
    UpdateJob,
)
from agentd.store.writes import RowMissing

T0 = 1_800_000_000.0


def job(id: str, at: float | None, **kw: Any) -> JobRecord:
    fields: dict[str, Any] = {
        "name": None,
        "conversation_key": "telegram:42",
        "deliver_to": "telegram:42",
        "owner": "telegram:7",
        "user_id": "7",
        "kind": "reminder",
        "text": "drink water",
        "schedule": {"every": 3600},
        "timezone": "UTC",
        "status": "active",
        "next_fire_at": at,
        "failures": 0,
        "created_at": T0,
        "updated_at": T0,
    }
    return JobRecord(id, **(fields | kw))


def fire(job_id: str, at: float, trigger: str = "schedule") -> FireRecord:
    return FireRecord(job_id, at, trigger, "ok", "run-1", at, at + 1)


def delivery(id: str, job_id: str, at: float, **kw: Any) -> DeliveryRecord:
    fields: dict[str, Any] = {
        "conversation_key": "telegram:42",
        "owner": "telegram:7",
        "user_id": "7",
        "text": "Reminder: drink water",
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": at,
        "created_at": at,
    }
    return DeliveryRecord(id, job_id, at, **(fields | kw))


async def test_the_next_fire_is_the_earliest_active_job(store: Store) -> None:
    assert await store.read(NextFireAt()) is None
    await store.write(
        InsertJob(job("a", T0 + 60)),
        InsertJob(job("b", T0 + 30, status="paused")),
        InsertJob(job("c", T0 + 45)),
        InsertJob(job("d", None, name="standup")),
    )
    assert await store.read(NextFireAt()) == T0 + 45
    assert [j.id for j in await store.read(Jobs(named=True))] == ["d"]  # the agent file's
    assert [j.id for j in await store.read(DueJobs(T0 + 60))] == ["c", "a"]
    assert [j.id for j in await store.read(Jobs("telegram:42"))] == ["a", "b", "c", "d"]
    got = await store.read(JobById("a"))
    assert got is not None and got.schedule == {"every": 3600} and got.text == "drink water"


async def test_a_fire_is_recorded_once_and_moves_its_job_on(store: Store) -> None:
    await write_one(store, InsertJob(job("a", T0)))
    await write_one(store, CompleteFire(fire("a", T0), T0 + 3600, 0, "active", None, T0 + 1))
    assert await store.read(NextFireAt()) == T0 + 3600
    # the same fire again (another daemon that stalled): refused, and nothing of its batch is kept
    with pytest.raises(RowMissing):
        await store.write(
            InsertDelivery(delivery("d1", "a", T0)),
            CompleteFire(fire("a", T0), T0 + 3600, 0, "active", None, T0 + 2),
        )
    assert await store.read(JobDeliveries("a")) == []
    [recorded] = await store.read(JobFires("a"))
    assert recorded.daemon == "d1" and recorded.trigger == "schedule"
    # a manual run leaves the schedule alone
    await write_one(store, CompleteFire(fire("a", T0 + 10, "manual"), None, 0, "active", None, T0 + 11))
    assert await store.read(NextFireAt()) == T0 + 3600
    assert len(await store.read(JobFires("a"))) == 2


async def test_an_update_replaces_the_job_and_a_missing_one_is_refused(store: Store) -> None:
    await write_one(store, InsertJob(job("a", T0)))
    await write_one(store, UpdateJob(job("a", T0 + 7 * 86400, schedule={"cron": "0 9 * * 1"})))
    got = await store.read(JobById("a"))
    assert got is not None and got.schedule == {"cron": "0 9 * * 1"} and got.next_fire_at == T0 + 7 * 86400
    with pytest.raises(RowMissing):
        await write_one(store, UpdateJob(job("zz", T0)))


async def test_a_delivery_is_pending_until_acknowledged(store: Store) -> None:
    await store.write(InsertJob(job("a", T0)), InsertDelivery(delivery("d1", "a", T0)))
    assert await store.read(NextDeliveryAt()) == T0
    await write_one(store, DeliveryAttempt("d1", "pending", 1, T0 + 5, None, "HTTP 502"))
    assert await store.read(DueDeliveries(T0 + 1)) == []
    [due] = await store.read(DueDeliveries(T0 + 5))
    assert due.attempts == 1 and due.last_error == "HTTP 502"
    await write_one(store, DeliveryAttempt("d1", "sent", 2, T0 + 5, T0 + 6, None))
    assert await store.read(NextDeliveryAt()) is None
    [sent] = await store.read(JobDeliveries("a"))
    assert sent.status == "sent" and sent.sent_at == T0 + 6
    totals = await store.read(JobTotals())
    assert totals == {"jobs_active": 1, "deliveries_sent": 1}


async def test_a_persons_jobs_are_exported_then_erased(store: Store) -> None:
    await store.write(
        InsertJob(job("a", T0)),
        InsertJob(job("b", T0, owner="telegram:8", user_id="8")),
        InsertDelivery(delivery("d1", "a", T0)),
        CompleteFire(fire("a", T0), T0 + 3600, 0, "active", None, T0),
    )
    exported = await store.read(PersonJobs("7"))
    assert [j["id"] for j in exported["jobs"]] == ["a"]
    assert [d["text"] for d in exported["deliveries"]] == ["Reminder: drink water"]
    assert await write_one(store, DeletePersonJobs("7")) == {"jobs": 1, "deliveries": 1}
    assert [j.id for j in await store.read(Jobs(ended=True))] == ["b"]
    assert await store.read(JobFires("a")) == []
    assert await store.read(PersonJobs("7")) == {"jobs": [], "deliveries": []}
