"""The operator's jobs delivered where the agent file says, through the real chat libraries: a Discord
channel (discord.py against the fake gateway and REST) and a Slack channel (slack-bolt, Socket Mode,
against the fake Slack), each once, at the time the test's clock says, and recorded `sent`."""

from __future__ import annotations

import json
from pathlib import Path

from testkit.clock import ManualClock
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlack
from tests.schedule.support import T0, agent_of, deliveries_of, jobs_of, scheduling_daemon, until

SLACK_CHANNEL = "C0STANDUP"


def agent_file(d: FakeDiscord, channel: int, s: FakeSlack) -> str:
    q = json.dumps
    return f"""\
model: offline/echo
channels:
  discord: {{token: {q(d.token)}, api_base_url: {q(d.api_base_url)}, gateway_url: {q(d.gateway_url)}}}
  slack: {{bot_token: {q(s.bot_token)}, app_token: {q(s.app_token)}, api_base_url: {q(s.api_url)}}}
schedule:
  timezone: UTC
  jobs:
    to_discord:
      every: 1h
      prompt: Summarise the hour for the Discord channel.
      deliver: {{channel: discord, to: "{channel}"}}
    to_slack:
      every: 1h
      prompt: Summarise the hour for the Slack channel.
      deliver: {{channel: slack, to: {SLACK_CHANNEL}}}
"""


async def test_operator_jobs_reach_a_discord_channel_and_a_slack_channel_once_each(
    tmp_path: Path, discord_fake: FakeDiscord
) -> None:
    guild = discord_fake.add_guild("team")
    standup = discord_fake.add_text_channel(guild, "standup")
    clock = ManualClock(T0)
    async with FakeSlack() as slack:
        agents = {"bot": agent_file(discord_fake, standup, slack)}
        async with scheduling_daemon(tmp_path, agents, clock, {}) as daemon:
            agent = agent_of(daemon)
            await until(
                lambda: discord_fake.connected() and slack.open_sockets, "both platforms connected", 20
            )

            async def synced() -> bool:  # the agent file's jobs are written once the agent has started
                return {j.name for j in await jobs_of(agent)} == {"to_discord", "to_slack"}

            await until(synced, "the operator's jobs in the store", 10)
            clock.advance(3600 + 1)  # the hour came
            await discord_fake.wait_for_sent(1, timeout=15)
            await slack.wait_for_posts(1, timeout=15)
            [to_discord] = [m for m in discord_fake.sent if m.channel_id == standup]
            assert "Summarise the hour for the Discord channel." in to_discord.content
            [to_slack] = [p for p in slack.posts if p.get("channel") == SLACK_CHANNEL]
            assert "Summarise the hour for the Slack channel." in str(to_slack.get("text"))

            async def all_sent() -> bool:
                rows = await deliveries_of(agent)
                return len(rows) == 2 and all(r.status == "sent" for r in rows)

            await until(all_sent, "both deliveries recorded sent", 10)
            assert len(discord_fake.sent) == 1 and len(slack.posts) == 1  # once each
