"""What happens around a fire: fires missed while no daemon ran (one catch-up, or none with `skip`),
a job whose runs keep failing pauses and its owner is told, a delivery the platform refuses is retried
with backoff and reported, and a person's erasure takes their jobs and deliveries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.channels.telegram import NETWORK_RETRIES, TelegramChannel
from agentd.events import InboundEvent
from agentd.store.job_queries import PersonJobs
from testkit.clock import ManualClock
from testkit.fake_telegram import FakeTelegram
from testkit.scripted import ScriptedProvider
from tests.schedule.support import T0, agent_of, deliveries_of, fires_of, jobs_of, scheduling_daemon, until

HOUR = 3600.0
BOT = """\
model: scripted/m
memory: {{scope: thread}}
channels:
  telegram: {{token: "{token}", api_base_url: "{url}", poll_timeout: 1}}
schedule:
  missed: {missed}
  catch_up_within: 6h
  pause_after_failures: 3
  jobs:
    water:
      every: 1h
      kind: reminder
      prompt: drink water
      deliver: {{channel: telegram, to: 42}}
"""


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


def bot(telegram: FakeTelegram, missed: str = "run_once") -> str:
    return BOT.format(token=telegram.token, url=telegram.api_base_url, missed=missed)


@pytest.mark.parametrize("missed", ["run_once", "skip"])
async def test_a_daemon_down_across_three_fires(tmp_path: Path, telegram: FakeTelegram, missed: str) -> None:
    clock = ManualClock(T0)
    agents, model = {"bot": bot(telegram, missed)}, {"scripted": ScriptedProvider()}
    async with scheduling_daemon(tmp_path, agents, clock, model) as daemon:
        [job] = await until(lambda: jobs_of(agent_of(daemon)), "the file's job made")
        assert job.next_fire_at == T0 + HOUR
    clock.advance(3 * HOUR + 600)  # no daemon at T0+1h, +2h, +3h
    async with scheduling_daemon(tmp_path, agents, clock, model) as daemon:
        agent = agent_of(daemon)
        [fire] = await until(lambda: fires_of(agent, job.id), "the missed fires handled")
        misses = [e["data"] for e in await agent.audit_events(kind="job") if e["action"] == "miss"]
        assert [m["fire_at"] for m in misses] == [T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR]
        [moved] = await jobs_of(agent)
        assert moved.next_fire_at == T0 + 4 * HOUR  # the schedule goes on from now
        if missed == "run_once":
            assert (fire.trigger, fire.status) == ("catch_up", "ok")
            sent = await telegram.wait_for_sent(1)
            assert sent[0]["text"] == "Reminder: drink water"
        else:
            assert (fire.trigger, fire.status) == ("schedule", "missed")
            assert await deliveries_of(agent) == []
        clock.set(T0 + 4 * HOUR)  # and fires on time again, once
        await until(lambda: _fires(agent, job.id, 2), "the next fire")
        sent = await telegram.wait_for_sent(2 if missed == "run_once" else 1)
    assert len(telegram.sent) == (2 if missed == "run_once" else 1)


async def _fires(agent: object, job_id: str, n: int) -> bool:
    return len(await fires_of(agent, job_id)) >= n  # type: ignore[arg-type]


async def test_a_failed_delivery_is_retried_with_backoff_and_reported(
    tmp_path: Path, telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TelegramChannel, "retry_base", 0.01)  # the channel's own quick retries, quicker
    clock = ManualClock(T0)
    async with scheduling_daemon(
        tmp_path, {"bot": bot(telegram)}, clock, {"scripted": ScriptedProvider()}
    ) as d:
        agent = agent_of(d)
        [job] = await until(lambda: jobs_of(agent), "the file's job made")
        telegram.fail("sendMessage", NETWORK_RETRIES + 1, how="500")  # past the channel's own retries
        clock.set(T0 + HOUR)
        [delivery] = await until(lambda: _attempted(agent), "a failed attempt recorded")
        assert delivery.status == "pending" and "could not post" in (delivery.last_error or "")
        assert delivery.next_attempt_at == T0 + HOUR + 5  # the first retry, 5 s on
        failed = [e for e in await agent.audit_events(kind="job") if e["action"] == "delivery_failed"]
        assert failed[0]["data"]["attempts"] == 1 and not failed[0]["data"]["final"]
        assert telegram.sent == []  # never logged as delivered when it was not
        listing = await d.agent("bot").handle(  # type: ignore[union-attr]
            InboundEvent("bot", "telegram:42", "/jobs", "telegram", user_id="42")
        )
        assert "delivery failing (1 tries so far, retrying)" in listing.text
        clock.advance(5)
        sent = await telegram.wait_for_sent(1)
        assert sent[0]["text"] == "Reminder: drink water"
        [done] = await until(lambda: _sent(agent), "the retry recorded as sent")
        assert done.attempts == 2 and done.id == delivery.id
        text, _ = d.metrics_text()
        assert b'agentd_job_deliveries_total{agent="bot",outcome="retry"} 1.0' in text
        assert b'agentd_job_deliveries_total{agent="bot",outcome="sent"} 1.0' in text
        assert job.id


async def _attempted(agent: object) -> list[object]:
    return [d for d in await deliveries_of(agent) if d.attempts > 0]  # type: ignore[arg-type]


async def _sent(agent: object) -> list[object]:
    return [d for d in await deliveries_of(agent) if d.status == "sent"]  # type: ignore[arg-type]


TASKER = """\
model: scripted/m
memory: {{scope: thread}}
channels:
  telegram: {{token: "{token}", api_base_url: "{url}", poll_timeout: 1}}
schedule: {{pause_after_failures: 3}}
"""


async def test_a_runaway_job_pauses_and_its_owner_is_told(tmp_path: Path, telegram: FakeTelegram) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    agents = {"bot": TASKER.format(token=telegram.token, url=telegram.api_base_url)}
    async with scheduling_daemon(tmp_path, agents, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="every 10m", what="check the feed", kind="task").reply("OK.")
        telegram.send_text("check the feed every 10 minutes", user_id=42)
        await telegram.wait_for_sent(1)
        [job] = await jobs_of(agent)
        for n in range(1, 4):
            model.fail("HTTP 500")
            clock.set(T0 + n * 600)
            await until(lambda n=n: _fires(agent, job.id, n), f"fire {n}")
        [paused] = await jobs_of(agent)
        assert paused.status == "paused" and paused.failures == 3
        assert "3 failed runs" in (paused.paused_reason or "")
        sent = await telegram.wait_for_sent(2)
        assert sent[-1]["chat_id"] == 42 and f"/jobs resume {job.id}" in sent[-1]["text"]
        actions = [(e["action"], e["data"].get("by")) for e in await agent.audit_events(kind="job")]
        assert ("pause", "scheduler") in actions
        assert [f.status for f in await fires_of(agent, job.id)] == ["error"] * 3
        clock.set(T0 + 3600)  # paused: no more runs, no more cost
        calls = len(model.requests)
        assert "Resumed" in (await _say(telegram, f"/jobs resume {job.id}"))
        assert len(model.requests) == calls


async def _say(telegram: FakeTelegram, text: str) -> str:
    before = len(telegram.sent)
    telegram.send_text(text, user_id=42)
    return str((await telegram.wait_for_sent(before + 1))[-1]["text"])


async def test_erasure_removes_a_persons_jobs_and_their_pending_deliveries(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    agents = {"bot": TASKER.format(token=telegram.token, url=telegram.api_base_url)}
    async with scheduling_daemon(tmp_path, agents, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="every 1d", what="take the pills").reply("OK.")
        telegram.send_text("remind me daily to take the pills", user_id=42)
        await telegram.wait_for_sent(1)
        exported = await daemon.export_person("42")
        [held] = exported["agents"]["bot"]["jobs"] if "agents" in exported else exported["bot"]["jobs"]
        assert held["text"] == "take the pills"
        await daemon.erase_person("42", "test")
        assert await jobs_of(agent) == []
        assert await agent.state.store.read(PersonJobs("42")) == {"jobs": [], "deliveries": []}
        trail = [e for e in await agent.audit_events() if "take the pills" in str(e)]
        assert trail == []
