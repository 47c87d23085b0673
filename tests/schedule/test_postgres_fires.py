"""Three `agentd run` daemons on one PostgreSQL database, 1,000 jobs due in the same minute: each fires
exactly once, spread over the daemons, and one daemon killed with -9 mid-way hands its fires (and its
unsent deliveries) to the others within the lease. The daemons read the time from a file the test
writes (AGENTD_TEST_CLOCK_FILE, agentd/clock.py), so the minute comes when the test says."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from agentd.store.job_records import JobRecord
from agentd.store.job_writes import InsertJob
from agentd.store.postgres import PostgresBackend
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.daemon_process import DaemonProcess
from tests.schedule.receiver import Receiver
from tests.schedule.support import T0

JOBS = 1000
DAEMONS = 3
LEASE_S = 2
SECRET = "a-signing-secret-of-some-length"
BOT = """\
model: offline/echo
channels:
  webhook: {{deliver_url: "{url}", signing_secret: "{secret}"}}
schedule: {{}}
"""
SETTINGS = 'store: {{url: "{url}", lease_s: {lease}}}\n'


def job(n: int) -> JobRecord:
    at = T0 + 60 + n * 60 / JOBS  # spread over one minute
    return JobRecord(
        f"j{n:04d}",
        None,
        "webhook:deliver_url",
        "webhook:deliver_url",
        "webhook:ana",
        "ana",
        "reminder",
        f"number {n}",
        {"kind": "at", "expr": "x", "tz": "UTC", "at": at},
        "UTC",
        "active",
        at,
        0,
        T0,
        T0,
    )


def count(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql).fetchall()


async def test_three_daemons_fire_1000_jobs_once_each_and_one_killed_hands_over(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with PostgresBackend(postgres_url, daemon="test") as backend:
        store = backend.store("bot")
        await store.open()
        for start in range(0, JOBS, 250):
            await store.write(*(InsertJob(job(n)) for n in range(start, start + 250)))
        await store.close()
    clock_file = tmp_path / "clock"
    clock_file.write_text(str(T0))
    monkeypatch.setenv("AGENTD_TEST_CLOCK_FILE", str(clock_file))
    async with Receiver(SECRET) as receiver:
        daemons = []
        for n in range(DAEMONS):
            root = tmp_path / f"host{n}"
            (root / "agents").mkdir(parents=True)
            (root / "agents" / "bot.yaml").write_text(BOT.format(url=receiver.url, secret=SECRET))
            (root / "agentd.yaml").write_text(SETTINGS.format(url=postgres_url, lease=LEASE_S))
            daemons.append(DaemonProcess(root))
        try:
            await asyncio.gather(*(d.start() for d in daemons))
            clock_file.write_text(str(T0 + 120))  # the minute came: all 1,000 are due
            fired = "SELECT count(*) FROM agentd.job_fires"
            await wait_until(lambda: count(postgres_url, fired)[0][0] >= JOBS // 4, "a quarter fired", 60)
            victim = daemons[0]
            assert victim.proc is not None
            victim_pid = victim.proc.pid
            victim.proc.kill()  # -9, mid-way through the fires: its leases lapse, the others go on
            killed_at = time.monotonic()
            await wait_until(lambda: count(postgres_url, fired)[0][0] == JOBS, "every job fired", 120)
            handed_over_s = time.monotonic() - killed_at
            pending = "SELECT count(*) FROM agentd.job_deliveries WHERE status <> 'sent'"
            await wait_until(lambda: count(postgres_url, pending)[0][0] == 0, "every delivery sent", 120)
        finally:
            for d in daemons:
                d.kill()
        per_job = count(postgres_url, "SELECT job_id, count(*) FROM agentd.job_fires GROUP BY job_id")
        assert len(per_job) == JOBS and {n for _, n in per_job} == {1}  # each exactly once
        runs = count(postgres_url, "SELECT count(*) FROM agentd.runs WHERE trigger = 'schedule'")
        assert runs[0][0] == JOBS
        done = count(postgres_url, "SELECT status, count(*) FROM agentd.jobs GROUP BY status")
        assert done == [("done", JOBS)]
        spread = Counter(
            dict(count(postgres_url, "SELECT daemon, count(*) FROM agentd.job_fires GROUP BY daemon"))
        )
        # every daemon took part; the two that lived carried the minute (the victim's share depends on
        # how far it got before the kill, so it only has to have fired at least one)
        victim_id = next(d for d in spread if f":{victim_pid}:" in str(d))
        assert len(spread) == DAEMONS and spread[victim_id] >= 1, spread
        assert min(n for d, n in spread.items() if d != victim_id) >= JOBS // 10, spread
        # every delivery arrived; a duplicate only from the window between the receiver's 2xx and our
        # record of it, for the sends the victim had in flight when it died
        assert len(receiver.ids) == JOBS
        print(
            f"\nfires per daemon {sorted(spread.values())}; all fired {handed_over_s:.1f} s after the kill;"
            f" duplicate deliveries {receiver.duplicates}"
        )
        assert receiver.duplicates <= 8


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
LLM_SETTINGS = (
    'store: {{url: "{url}", lease_s: {lease}}}\n'
    'providers: {{fake: {{kind: openai, base_url: "{llm}", api_key: k, max_retries: 0}}}}\n'
)


async def test_a_daemon_killed_inside_a_task_fire_hands_it_to_another_within_the_lease(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock_file = tmp_path / "clock"
    clock_file.write_text(str(T0))
    monkeypatch.setenv("AGENTD_TEST_CLOCK_FILE", str(clock_file))
    with FakeLLM() as llm:
        async with Receiver(SECRET) as receiver:
            daemons = []
            for n in range(2):
                root = tmp_path / f"host{n}"
                (root / "agents").mkdir(parents=True)
                (root / "agents" / "bot.yaml").write_text(TASK.format(url=receiver.url, secret=SECRET))
                settings = LLM_SETTINGS.format(url=postgres_url, lease=LEASE_S, llm=llm.openai_base_url)
                (root / "agentd.yaml").write_text(settings)
                daemons.append(DaemonProcess(root))
            try:
                await asyncio.gather(*(d.start() for d in daemons))
                jobs = "SELECT id FROM agentd.jobs"
                await wait_until(lambda: count(postgres_url, jobs), "the file's job made", 20)
                [(job_id,)] = count(postgres_url, jobs)
                ids = {d.get("/healthz")["daemon"]: d for d in daemons}
                llm.hang(60)
                clock_file.write_text(str(T0 + 3600))
                await asyncio.to_thread(llm.wait_for_requests, 1, 20)
                holder = f"SELECT holder FROM agentd.leases WHERE name = 'job:bot:{job_id}'"
                [(firing,)] = count(postgres_url, holder)
                victim = ids[firing]
                assert victim.proc is not None
                llm.reply("The day, summarised.")
                victim.proc.kill()  # -9 inside the fire's model call, holding the job's lease
                killed_at = time.monotonic()
                await wait_until(lambda: len(receiver.accepted) >= 1, "the other daemon's delivery", 60)
                took_s = time.monotonic() - killed_at
                await asyncio.sleep(1.0)  # (time for a second one, were there one)
            finally:
                for d in daemons:
                    d.kill()
    fires = count(postgres_url, "SELECT fire_at, status, daemon FROM agentd.job_fires")
    assert [(at, status) for at, status, _ in fires] == [(T0 + 3600, "ok")]
    assert fires[0][2] != firing  # fired by the survivor
    assert [a["data"]["text"] for a in receiver.accepted] == ["The day, summarised."]
    print(f"\nthe task's fire was handed over and delivered {took_s:.1f} s after the kill")
    assert took_s < 30, took_s  # the lease (2 s) and the conversation's claim lapse, then it runs
