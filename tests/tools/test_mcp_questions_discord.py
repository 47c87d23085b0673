"""A tool server's question on Discord: a daemon on loopback whose agent has the Discord channel (real
discord.py against the fake gateway and REST) and server-everything; the question is posted into the
channel (or the DM) the message came from, and the person's `/answer` there completes the tool call."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from testkit.fake_discord import FakeDiscord
from testkit.fake_llm import FakeLLM
from testkit.waiting import wait_until
from tests.support import daemon_on_loopback
from tests.tools.reference import everything, needs_node
from tests.tools.support import tool_results

pytestmark = needs_node
ASK = "everything__trigger-elicitation-request"


def agent_file(fake: FakeDiscord) -> str:
    discord_spec = {"token": fake.token, "api_base_url": fake.api_base_url, "gateway_url": fake.gateway_url}
    tools = json.dumps({"mcp": {"everything": everything()}})
    return (
        "purpose: You help.\nmodel: fake/m\nmemory: {scope: thread}\n"
        f"channels: {{discord: {json.dumps(discord_spec)}}}\ntools: {tools}\n"
    )


def settings(fake: FakeLLM) -> str:
    return f"providers: {{fake: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"


def question_in(fake: FakeDiscord, channel_id: int) -> str | None:
    for text in fake.visible(channel_id):
        if match := re.search(r"The tool server everything asks \[([0-9a-f]{6})\]", text):
            return match.group(1)
    return None


@pytest.mark.parametrize("where", ["guild channel", "direct message"])
async def test_the_question_is_posted_where_the_message_came_from_and_answered_there(
    tmp_path: Path, fake: FakeLLM, discord_fake: FakeDiscord, where: str
) -> None:
    guild = discord_fake.add_guild("home")
    general = discord_fake.add_text_channel(guild, "general")
    alice = discord_fake.add_user("alice")
    fake.reply(tool_calls=[(ASK, {})])
    fake.reply("Thanks, noted.")
    async with daemon_on_loopback(tmp_path, {"assistant": agent_file(discord_fake)}, settings(fake)) as (
        daemon,
        _,
    ):
        await wait_until(discord_fake.connected, "the bot to connect", timeout=20)
        if where == "guild channel":
            channel = general
            await discord_fake.user_message(general, alice, "sign me up", mention_bot=True)
        else:
            channel = discord_fake.dm_channel_id(alice)
            await discord_fake.dm(alice, "sign me up")
        qid = await wait_until(lambda: question_in(discord_fake, channel), "the question", timeout=20)
        [question] = [t for t in discord_fake.visible(channel) if qid in t]
        assert f"/decline {qid}" in question and "name (string)" in question
        if where == "direct message":
            assert discord_fake.dms_opened == [alice]  # the DM is opened over REST: the key names the user
        answer = json.dumps({"name": "Ana Lima", "check": "yes", "integer": "7"})
        text = f"/answer {qid} {answer}"
        if where == "guild channel":
            await discord_fake.user_message(general, alice, text, mention_bot=True)
        else:
            await discord_fake.dm(alice, text)
        await wait_until(lambda: "Thanks, noted." in discord_fake.visible(channel), "the reply", timeout=20)
        assert f"Sent your answer to everything [{qid}]." in discord_fake.visible(channel)
        [result] = tool_results(fake.requests[1].json)
        assert "- Name: Ana Lima" in result and "Agreed to terms: true" in result
        agent = daemon.fleet.agent("assistant")
        assert agent is not None
        events = [e for e in await agent.audit_events(kind="tool") if "elicitation" in e["action"]]
        assert sorted(e["action"] for e in events) == ["elicitation_answered", "elicitation_requested"]
        assert {e["data"].get("via") for e in events} >= {"posted"}
