"""`agentd run` killed with -9 during a fire and during deliveries (SQLite, one daemon, restarted on
the same folder). The daemon reads the time from a file the test writes (AGENTD_TEST_CLOCK_FILE).

A fire is committed with its run: killed inside the model call, nothing of it was kept, and the
restarted daemon fires it again — one delivery. A delivery is marked sent once the receiver answered
2xx: killed between that answer and our record, it is sent again after the restart. That window is
measured here (how many of the deliveries in flight at each kill arrived twice) and printed."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from agentd.store.base import write_one
from agentd.store.job_queries import JobDeliveries, JobFires, Jobs
from agentd.store.job_records import JobRecord
from agentd.store.job_writes import InsertJob
from agentd.store.sqlite import SqliteStore, StoreExecutor
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess
from tests.schedule.receiver import Receiver
from tests.schedule.support import T0

SECRET = "a-signing-secret-of-some-length"
TASK = """\
model: fake/m
channels:
  webhook: {{deliver_url: "{url}", signing_secret: "{secret}"}}
schedule:
  jobs:
    summary:
      every: 1h
      prompt: Summarise the day.
      deliver: {{channel: webhook}}
"""
REMINDERS = """\
model: offline/echo
channels:
  webhook: {{deliver_url: "{url}", signing_secret: "{secret}"}}
schedule: {{}}
"""
SETTINGS = 'providers: {{fake: {{kind: openai, base_url: "{llm}", api_key: k, max_retries: 0}}}}\n'


def set_clock(path: Path, epoch: float) -> None:
    """What the daemon's clock reads from now on (a few bytes: no wait worth a thread)."""
    path.write_text(str(epoch))


async def read_store(path: Path, *queries: object) -> list[object]:
    executor = StoreExecutor()
    store = SqliteStore(path, executor)
    await store.open()
    try:
        return await store.read_many(*queries)  # type: ignore[arg-type]
    finally:
        await store.close()
        executor.shutdown()


@pytest.fixture
def clock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "clock"
    path.write_text(str(T0))
    monkeypatch.setenv("AGENTD_TEST_CLOCK_FILE", str(path))
    return path


async def test_killed_inside_a_fires_model_call_the_fire_runs_again_and_delivers_once(
    tmp_path: Path, clock_file: Path
) -> None:
    with FakeLLM() as llm:
        async with Receiver(SECRET) as receiver:
            (tmp_path / "agents").mkdir()
            (tmp_path / "agents" / "bot.yaml").write_text(TASK.format(url=receiver.url, secret=SECRET))
            (tmp_path / "agentd.yaml").write_text(SETTINGS.format(llm=llm.openai_base_url))
            daemon = await DaemonProcess(tmp_path).start()
            try:
                await wait_until(lambda: (tmp_path / "data" / "bot.sqlite").exists(), "the job made", 20)
                llm.hang(60)
                set_clock(clock_file, T0 + 3600)
                await asyncio.to_thread(llm.wait_for_requests, 1, 20)
                daemon.kill()  # -9 inside the fire's model call
                llm.reply("Two things happened.")
                await daemon.start()
                await wait_until(lambda: len(receiver.accepted) >= 1, "the delivery", 30)
                await asyncio.sleep(0.5)  # (time for a second one, were there one)
            finally:
                daemon.kill()
        [job] = (await read_store(tmp_path / "data" / "bot.sqlite", Jobs()))[0]  # type: ignore[misc]
        fires, deliveries = await read_store(
            tmp_path / "data" / "bot.sqlite", JobFires(job.id), JobDeliveries(job.id)
        )
        assert [(f.fire_at, f.status) for f in fires] == [(T0 + 3600, "ok")]  # type: ignore[attr-defined]
        assert [d.status for d in deliveries] == ["sent"]  # type: ignore[attr-defined]
        assert [a["data"]["text"] for a in receiver.accepted] == ["Two things happened."]


ROUNDS = 4
PER_ROUND = 60


async def test_killed_during_deliveries_every_one_arrives_and_the_duplicate_window_is_measured(
    tmp_path: Path, clock_file: Path
) -> None:
    rng = random.Random(18)
    data = tmp_path / "data" / "bot.sqlite"
    async with Receiver(SECRET) as receiver:
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "bot.yaml").write_text(REMINDERS.format(url=receiver.url, secret=SECRET))
        daemon = DaemonProcess(tmp_path)
        now, killed_in_flight = T0, 0
        for round_ in range(ROUNDS):
            executor = StoreExecutor()
            store = SqliteStore(data, executor)
            await store.open()
            for n in range(PER_ROUND):  # due a minute on, while the daemon is down
                at = now + 60
                job = JobRecord(
                    f"r{round_}-{n}",
                    None,
                    "webhook:deliver_url",
                    "webhook:deliver_url",
                    "webhook:ana",
                    "ana",
                    "reminder",
                    f"round {round_} number {n}",
                    {"kind": "at", "expr": "x", "tz": "UTC", "at": at},
                    "UTC",
                    "active",
                    at,
                    0,
                    now,
                    now,
                )
                await write_one(store, InsertJob(job))
            await store.close()
            executor.shutdown()
            await daemon.start()
            before = len(receiver.ids)
            now += 60
            set_clock(clock_file, now)
            kill_after = before + rng.randrange(1, PER_ROUND - 10)
            await wait_until(lambda k=kill_after: len(receiver.ids) >= k, "some deliveries", 30)
            daemon.kill()  # -9 with deliveries in flight
            killed_in_flight += 1
            await daemon.start()
            total = before + PER_ROUND
            await wait_until(lambda t=total: len(receiver.ids) >= t, "every delivery of the round", 30)
            await asyncio.sleep(0.3)
            daemon.stop()
        [pending] = await read_store(data, JobDeliveries(status="pending", limit=10_000))
        assert pending == []
    assert len(receiver.ids) == ROUNDS * PER_ROUND  # every delivery arrived
    print(
        f"\nkill -9 during deliveries: {ROUNDS} kills, {ROUNDS * PER_ROUND} deliveries, "
        f"{receiver.duplicates} arrived twice (the window between the receiver's 2xx and our record)"
    )
    assert receiver.duplicates <= ROUNDS * 8  # at most what was in flight at each kill
