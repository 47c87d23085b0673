"""Jobs made from the chat (the fake Telegram, a scripted model calling the job tools): a reminder
arrives in the same chat at its time, as written and with no model call; "make it weekly instead"
changes that job; /jobs lists and cancels; a bad job is refused with a reason the model reads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.messages import ToolResultPart
from testkit.clock import ManualClock
from testkit.fake_telegram import FakeTelegram
from testkit.scripted import ScriptedProvider
from tests.schedule.support import T0, agent_of, deliveries_of, fires_of, jobs_of, scheduling_daemon, until
from tests.support import Harness
from tests.support import say as talk

BOT = """\
model: scripted/m
memory: {{scope: thread}}
channels:
  telegram: {{token: "{token}", api_base_url: "{url}", poll_timeout: 1}}
schedule: {{timezone: Europe/Lisbon, max_jobs_per_person: 2}}
"""
DAY = 86400.0


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


def bot(telegram: FakeTelegram) -> str:
    return BOT.format(token=telegram.token, url=telegram.api_base_url)


async def say(telegram: FakeTelegram, text: str, user: int = 42) -> str:
    """What the bot answered in the person's chat."""
    before = len(telegram.sent)
    telegram.send_text(text, user_id=user)
    sent = await telegram.wait_for_sent(before + 1, timeout=10)
    return str(sent[-1]["text"])


def tool_results(model: ScriptedProvider) -> list[str]:
    """What the tools answered, once each, in order (every request repeats the thread before it)."""
    seen: dict[tuple[str, str], str] = {}
    for request in model.requests:
        for message in request.messages:
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    seen.setdefault((part.call_id, part.content), part.content)
    return list(seen.values())


async def test_a_reminder_arrives_in_the_same_chat_at_its_time_and_weekly_changes_that_job(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    async with scheduling_daemon(tmp_path, {"bot": bot(telegram)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="every 1d", what="drink water", kind="reminder").reply("Will do.")
        assert await say(telegram, "remind me every day to drink water") == "Will do."
        [job] = await jobs_of(agent)
        assert (job.owner, job.user_id, job.conversation_key) == ("telegram:42", "42", "telegram:42")
        assert job.next_fire_at == T0 + DAY and job.timezone == "Europe/Lisbon"

        calls = len(model.requests)
        clock.advance(DAY)
        sent = await telegram.wait_for_sent(2, timeout=10)
        assert (sent[-1]["chat_id"], sent[-1]["text"]) == (42, "Reminder: drink water")
        assert len(model.requests) == calls  # a reminder is delivered, not answered by the model
        [fire] = await fires_of(agent, job.id)
        assert (fire.trigger, fire.status, fire.fire_at) == ("schedule", "ok", T0 + DAY)
        [delivery] = await until(lambda: _sent(agent, job.id), "the delivery recorded as sent")
        assert delivery.attempts == 1 and delivery.text == "Reminder: drink water"

        # the model sees the conversation's jobs: "make it weekly instead" changes that job, no new one
        model.call("update_job", id=job.id, when="cron 0 9 * * 1").reply("Weekly, Mondays at 9.")
        assert await say(telegram, "make it weekly instead") == "Weekly, Mondays at 9."
        assert job.id in model.requests[-2].system
        [changed] = await jobs_of(agent)
        assert changed.id == job.id and changed.schedule["kind"] == "cron"
        # Monday 2027-01-18 09:00 in Lisbon (WET, UTC+0 in January)
        assert changed.next_fire_at == 1_800_262_800.0
        runs = await agent.runs()
        assert {r["trigger"] for r in runs} == {"message", "schedule"}
        actions = [e["action"] for e in await agent.audit_events(kind="job")]
        assert actions == ["create", "fire", "delivered", "update"]
        assert "1 scheduled run" in await say(telegram, "/status")
        text, _ = daemon.metrics_text()
        assert b'agentd_job_fires_total{agent="bot",status="ok",trigger="schedule"} 1.0' in text
        assert b'agentd_scheduled_runs_total{agent="bot",outcome="ok"} 1.0' in text
        assert b"agentd_job_fire_lateness_seconds_count 1.0" in text


async def _sent(agent: object, job_id: str) -> list[object]:
    found = await deliveries_of(agent, job_id)  # type: ignore[arg-type]
    return found if found and all(d.status == "sent" for d in found) else []


async def test_jobs_lists_and_cancels_and_only_the_owner_may(tmp_path: Path, telegram: FakeTelegram) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    async with scheduling_daemon(tmp_path, {"bot": bot(telegram)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="at 2027-01-16T10:00", what="call mum").reply("Noted.")
        await say(telegram, "remind me tomorrow at 10 to call mum")
        [job] = await jobs_of(agent)
        listing = await say(telegram, "/jobs")
        assert job.id in listing and "call mum" in listing and "2027-01-16 10:00 WET" in listing
        # someone else in another chat cannot cancel it
        assert "not yours" in await say(telegram, f"/jobs cancel {job.id}", user=7)
        assert "Cancelled" in await say(telegram, f"/jobs cancel {job.id}")
        [cancelled] = await jobs_of(agent)
        assert cancelled.status == "cancelled"
        assert await say(telegram, "/jobs") == "No jobs in this conversation."
        model.call("schedule_job", when="at 2027-01-17T10:00", what="water the plants").reply("Noted.")
        await say(telegram, "and on Sunday to water the plants")
        [later] = [j for j in await jobs_of(agent) if j.id != job.id]
        assert later.next_fire_at is not None and job.next_fire_at is not None
        assert later.next_fire_at > job.next_fire_at
        clock.set(later.next_fire_at)  # past both: only the one not cancelled fires
        sent = await telegram.wait_for_sent(len(telegram.sent) + 1, timeout=10)
        assert sent[-1]["text"] == "Reminder: water the plants"
        assert await fires_of(agent, job.id) == []
        assert [e["action"] for e in await agent.audit_events(kind="job")][:2] == ["create", "cancel"]


async def test_bad_jobs_from_the_chat_are_refused_with_a_reason_the_model_reads(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    async with scheduling_daemon(tmp_path, {"bot": bot(telegram)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="every 10s", what="spam").reply("a")
        await say(telegram, "every 10 seconds")
        model.call("schedule_job", when="at 2020-01-01T09:00", what="late").reply("b")
        await say(telegram, "in the past")
        model.call("schedule_job", when="every 1d", what="x", timezone="Mars/Base").reply("c")
        await say(telegram, "on mars")
        results = tool_results(model)
        assert "min_interval" in results[0] and "5m" in results[0]
        assert "in the past" in results[1]
        assert "Mars/Base" in results[2]
        assert await jobs_of(agent) == []
        # max_jobs_per_person: 2
        for n in range(3):
            model.call("schedule_job", when="every 1d", what=f"job {n}").reply(f"ok {n}")
            await say(telegram, f"job {n}")
        assert "cancel one first" in tool_results(model)[-1]
        assert len(await jobs_of(agent)) == 2
        refused = [json.dumps(e) for e in await agent.audit_events(kind="job")]
        assert len(refused) == 2  # only the two made are events


POLICED = """\
model: scripted/m
channels: {webhook: {}}
schedule: {}
tools:
  deny: [jobs.cancel_job]
  ask: [jobs.schedule_job]
"""


async def test_the_job_tools_are_under_the_tools_policy(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(POLICED, providers={"scripted": model})
    await talk(agent)("hello")
    offered = {t.name for t in model.requests[-1].tools}
    assert {"schedule_job", "list_jobs", "update_job", "run_job_now"} <= offered
    assert "cancel_job" not in offered  # deny: not offered
    model.call("schedule_job", when="every 1d", what="stretch").reply("a")
    reply = await talk(agent)("remind me daily to stretch")
    assert reply.approval is not None  # ask: a person approves the call first


async def test_run_job_now_fires_once_and_does_not_shift_the_schedule(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    async with scheduling_daemon(tmp_path, {"bot": bot(telegram)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        model.call("schedule_job", when="every 1d", what="stretch").reply("Daily.")
        await say(telegram, "remind me daily to stretch")
        [job] = await jobs_of(agent)
        model.call("run_job_now", id=job.id).reply("Sent it now.")
        clock.advance(600)
        await say(telegram, "send it now too")
        sent = await telegram.wait_for_sent(3)
        assert "Reminder: stretch" in [s["text"] for s in sent]
        [fire] = await fires_of(agent, job.id)
        assert (fire.trigger, fire.fire_at) == ("manual", T0 + 600)
        [same] = await jobs_of(agent)
        assert same.next_fire_at == T0 + DAY  # the schedule stays as it was


async def test_a_job_where_nothing_can_be_delivered_later_is_refused(harness: Harness) -> None:
    model = ScriptedProvider()
    agent = await harness.agent(
        "model: scripted/m\nchannels: {webhook: {}}\nschedule: {}\n", providers={"scripted": model}
    )
    model.call("schedule_job", when="every 1d", what="stretch").reply("a")
    await talk(agent)("remind me daily to stretch")
    [result] = tool_results(model)
    assert "nothing can be delivered into this conversation later" in result and "deliver_url" in result
