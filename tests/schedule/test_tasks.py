"""Task jobs and heartbeats: the agent runs the job's prompt in the job's conversation (a run of its
own, trigger `schedule`) and its reply is delivered there — a Slack thread (the fake Slack); the
file's jobs deliver where the file says; a heartbeat with nothing to say says nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.store.queries import ActiveThread
from testkit.clock import ManualClock
from testkit.fake_slack import FakeSlack
from testkit.scripted import ScriptedProvider
from tests.schedule.support import T0, agent_of, deliveries_of, fires_of, jobs_of, scheduling_daemon, until

BOT = """\
model: scripted/m
memory: {{scope: thread}}
channels:
  slack: {{bot_token: "{bot}", app_token: "{app}", api_base_url: "{url}"}}
schedule:
  timezone: Europe/Lisbon
  jobs:
    standup:
      cron: "0 9 * * 1-5"
      prompt: Summarise what is still open for the team.
      deliver: {{channel: slack, to: C0123ABC}}
{heartbeat}"""
HEARTBEAT = """\
  heartbeat:
    every: 20m
    prompt: Is there anything the person should hear about now?
"""


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


def bot(slack: FakeSlack, heartbeat: str = "") -> str:
    return BOT.format(bot=slack.bot_token, app=slack.app_token, url=slack.api_url, heartbeat=heartbeat)


async def test_a_task_jobs_reply_arrives_in_the_slack_thread_it_was_made_in(
    tmp_path: Path, slack: FakeSlack
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    async with scheduling_daemon(tmp_path, {"bot": bot(slack)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        await slack.wait_for_connections(1)
        model.call("schedule_job", when="every 30m", what="What is open?", kind="task").reply(
            "Every half hour."
        )
        asked = slack.mention_event("tell me what is open every half hour")
        await slack.push_event(asked)
        [answer] = await slack.wait_for_posts(1)
        assert answer["thread_ts"] == asked["ts"]
        thread = f"slack:C0GENERAL:{asked['ts']}"
        [job] = [j for j in await jobs_of(agent) if j.name is None]
        assert (job.kind, job.conversation_key, job.owner) == ("task", thread, "slack:U0ALICE")

        model.reply("Two things are open: the release and the invoice.")
        clock.advance(1800)  # (the file's standup is at 09:00, an hour on)
        posts = await slack.wait_for_posts(2)
        assert posts[-1]["channel"] == "C0GENERAL" and posts[-1]["thread_ts"] == asked["ts"]
        assert posts[-1]["text"] == "Two things are open: the release and the invoice."
        assert model.requests[-1].messages[-1].text == "What is open?"
        [fire] = await fires_of(agent, job.id)
        assert fire.status == "ok" and fire.run_id is not None
        runs = {r["id"]: r for r in await agent.runs(thread)}
        assert runs[fire.run_id]["trigger"] == "schedule"
        # the reply is the conversation's: the next message reads it
        stored = await agent.state.store.read(ActiveThread(thread))
        assert stored.messages[-1].message.text == "Two things are open: the release and the invoice."
        await until(lambda: _all_sent(agent), "the delivery recorded as sent")


async def _all_sent(agent: object) -> bool:
    found = await deliveries_of(agent)  # type: ignore[arg-type]
    return bool(found) and all(d.status == "sent" for d in found)


async def test_the_files_job_delivers_where_the_file_says_and_a_reload_keeps_its_id(
    tmp_path: Path, slack: FakeSlack
) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)  # Friday 08:00 in Lisbon: the standup is at 09:00
    async with scheduling_daemon(tmp_path, {"bot": bot(slack)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        [standup] = await until(lambda: jobs_of(agent), "the file's job made")
        assert (standup.name, standup.deliver_to, standup.owner) == ("standup", "slack:C0123ABC", None)
        assert standup.next_fire_at == T0 + 3600
        model.reply("Nothing is open.")
        clock.advance(3600)
        [post] = await slack.wait_for_posts(1)
        assert (post["channel"], post.get("thread_ts"), post["text"]) == (
            "C0123ABC",
            None,
            "Nothing is open.",
        )
        await daemon.fleet.load("bot", tmp_path / "agents" / "bot.yaml")  # a reload changes nothing
        [same] = await jobs_of(agent)
        assert same.id == standup.id and same.next_fire_at == T0 + 3 * 86400 + 3600  # Monday 09:00


async def test_a_silent_heartbeat_sends_nothing_and_keeps_no_turn(tmp_path: Path, slack: FakeSlack) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)
    agents = {"bot": bot(slack, HEARTBEAT)}
    async with scheduling_daemon(tmp_path, agents, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        await slack.wait_for_connections(1)
        model.reply("Hi!")
        asked = slack.mention_event("hello")
        await slack.push_event(asked)
        await slack.wait_for_posts(1)
        thread = f"slack:C0GENERAL:{asked['ts']}"
        beat = await until(lambda: _heartbeat(agent), "the heartbeat job")

        model.reply("")  # nothing to report: the structured answer is an empty reply
        clock.advance(1200)  # (the file's standup is at 09:00, an hour on)
        [fire] = await until(lambda: fires_of(agent, beat.id), "the heartbeat fired")
        assert fire.status == "silent"
        assert len(slack.posts) == 1 and await deliveries_of(agent, beat.id) == []
        stored = await agent.state.store.read(ActiveThread(thread))
        assert [m.message.text for m in stored.messages] == ["hello", "Hi!"]  # no transcript turn
        assert "scheduled check-in" in model.requests[-1].messages[-1].text

        model.reply("Your invoice is due today.")
        clock.advance(1200)
        posts = await slack.wait_for_posts(2)
        assert posts[-1]["thread_ts"] == asked["ts"] and posts[-1]["text"] == "Your invoice is due today."


async def _heartbeat(agent: object) -> object:
    return next((j for j in await jobs_of(agent) if j.kind == "heartbeat"), None)  # type: ignore[arg-type]


async def test_a_heartbeat_outside_its_active_hours_does_not_run(tmp_path: Path, slack: FakeSlack) -> None:
    model = ScriptedProvider()
    clock = ManualClock(T0)  # 08:00 in Lisbon
    beat = HEARTBEAT + '    active_hours: "10:00-22:00"\n'
    async with scheduling_daemon(tmp_path, {"bot": bot(slack, beat)}, clock, {"scripted": model}) as daemon:
        agent = agent_of(daemon)
        job = await until(lambda: _heartbeat(agent), "the heartbeat job")
        clock.advance(1200)
        [fire] = await until(lambda: fires_of(agent, job.id), "the heartbeat's time")  # type: ignore[attr-defined]
        assert (fire.status, fire.run_id) == ("skipped", None)
        assert model.requests == []  # no model call, no cost
