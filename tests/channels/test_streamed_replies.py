"""`stream: true` on every chat channel: real client libraries against their fakes, which record edits.

One message is posted at the first text and edited as the reply grows; past a
platform's limit more messages follow; after a restart (the model called a
tool) leftovers are deleted; and at the end the messages are exactly what an
unstreamed reply posts: `split_message` of the reply at the platform's limit,
as Telegram stores it (without surrounding space).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import pytest

from agentd.channels.discord import DiscordChannel
from agentd.channels.slack import SlackChannel
from agentd.channels.splitting import split_message
from agentd.channels.telegram import TelegramChannel
from agentd.channels.telegram_routing import TelegramTarget
from agentd.config.discord import DiscordSpec
from agentd.config.loader import parse_agent
from agentd.config.slack import SlackSpec
from agentd.config.telegram import TelegramSpec
from agentd.errors import ConfigError
from testkit.channel_host import RecordingHost
from testkit.fake_discord import FakeDiscord
from testkit.fake_slack import FakeSlack
from testkit.fake_telegram import FakeTelegram
from testkit.waiting import wait_until

EVERY = 0.05  # seconds between edits: quick, for a fake on loopback
STREAMING = {"stream": True, "stream_edit_seconds": EVERY}
WORDS = " ".join(f"word{i}" for i in range(30)) + "."
ALICE = 1111


@dataclass
class Platform:
    """One channel running against its fake, with `stream: true`, seen from the person's side."""

    name: str
    limit: int
    say: Callable[[str], Any]  # a message the bot answers
    visible: Callable[[], list[str]]  # the bot's messages there now
    first_posts: Callable[[], list[str]]  # each message's text when it was posted
    edits: Callable[[], int]
    deletes: Callable[[], int]
    trims: bool = False  # the platform stores text without surrounding space (Telegram)

    def unstreamed(self, reply: str) -> list[str]:
        pieces = split_message(reply, self.limit)
        return [p.strip() for p in pieces] if self.trims else pieces


@contextlib.asynccontextmanager
async def discord_platform(host: RecordingHost, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Platform]:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    fake = FakeDiscord(heartbeat_ms=200)
    await fake.start()
    general = fake.add_text_channel(fake.add_guild("home"), "general")
    alice = fake.add_user("alice")
    endpoints = {"api_base_url": fake.api_base_url, "gateway_url": fake.gateway_url}
    spec = DiscordSpec(token=fake.token, **endpoints, **STREAMING)
    channel = DiscordChannel(host.agent, spec, guild_ready_timeout=0.05)
    try:
        async with running(channel, host):
            yield Platform(
                "discord",
                2000,
                say=lambda text: fake.user_message(general, alice, text, mention_bot=True),
                visible=lambda: fake.visible(general),
                first_posts=lambda: [str(m.body["content"]) for m in fake.sent],
                edits=lambda: len(fake.edits),
                deletes=lambda: len(fake.deletes),
            )
    finally:
        await fake.stop()


@contextlib.asynccontextmanager
async def slack_platform(host: RecordingHost, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Platform]:
    async with FakeSlack() as fake:
        tokens = {"bot_token": fake.bot_token, "app_token": fake.app_token}
        spec = SlackSpec(**tokens, api_base_url=fake.api_url, **STREAMING)
        async with running(SlackChannel(host.agent, spec), host):
            await fake.wait_for_connections(1)

            async def say(text: str) -> None:
                await fake.push_event(fake.mention_event(text))

            yield Platform(
                "slack",
                3900,
                say=say,
                visible=lambda: fake.visible("C0GENERAL"),
                first_posts=lambda: [str(p["text"]) for p in fake.posts],
                edits=lambda: len(fake.updates),
                deletes=lambda: len(fake.deletes),
            )


@contextlib.asynccontextmanager
async def telegram_platform(host: RecordingHost, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Platform]:
    async with FakeTelegram() as fake:
        spec = TelegramSpec(token=fake.token, api_base_url=fake.api_base_url, **STREAMING)
        async with running(TelegramChannel(host.agent, spec), host):
            yield Platform(
                "telegram",
                4096,
                say=lambda text: fake.send_text(text, user_id=ALICE),
                visible=lambda: fake.visible(ALICE),
                first_posts=lambda: [str(p["text"]) for p in fake.sent],
                edits=lambda: len(fake.edits),
                deletes=lambda: len(fake.deletes),
                trims=True,
            )


@contextlib.asynccontextmanager
async def running(channel: Any, host: RecordingHost) -> AsyncIterator[None]:
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(
            lambda: host.last_status(channel.name) == "running" or task.done(), "the channel to start"
        )
        assert not task.done(), task.exception()
        yield
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


PLATFORMS = {"discord": discord_platform, "slack": slack_platform, "telegram": telegram_platform}


async def answered(platform: Platform, host: RecordingHost, reply: str) -> list[str]:
    """Say something, wait until the messages show the whole reply, and return them."""
    expected = platform.unstreamed(reply)
    result = platform.say("go")
    if asyncio.iscoroutine(result):
        await result
    await wait_until(
        lambda: platform.visible() == expected, f"the {platform.name} messages to be the reply", 15
    )
    return platform.visible()


@pytest.mark.parametrize("name", PLATFORMS)
async def test_one_message_grows_by_edits_and_ends_as_the_unstreamed_reply(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = RecordingHost(reply_with=lambda _: WORDS, piece_delay=0.01)
    async with PLATFORMS[name](host, monkeypatch) as platform:
        shown = await answered(platform, host, WORDS)

    assert shown == platform.unstreamed(WORDS) and len(shown) == 1
    [first] = platform.first_posts()
    assert WORDS.startswith(first.strip()) and len(first) < len(WORDS)  # posted early, then edited
    assert platform.edits() >= 1


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_long_reply_with_code_grows_into_more_messages_split_as_unstreamed(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = {"discord": 2000, "slack": 3900, "telegram": 4096}[name]
    code = "\n".join(f"value_{i} = {i}" for i in range(limit // 12))
    reply = "Here is the plan.\n\n```python\n" + code + "\n```\n" + "That is all. " * (limit // 40)
    assert len(split_message(reply, limit)) >= 2
    host = RecordingHost(reply_with=lambda _: reply, piece_delay=0.02, piece_chars=limit // 6)
    async with PLATFORMS[name](host, monkeypatch) as platform:
        shown = await answered(platform, host, reply)

    assert shown == platform.unstreamed(reply)
    assert all(len(m) <= limit and m.count("```") % 2 == 0 for m in shown)
    assert len(platform.first_posts()) == len(shown)  # each message posted once, then edited
    assert platform.edits() >= len(shown) and platform.deletes() == 0


@pytest.mark.parametrize("name", PLATFORMS)
async def test_after_a_restart_the_messages_become_the_answer_and_leftovers_go(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = {"discord": 2000, "slack": 3900, "telegram": 4096}[name]
    preamble = "x" * (limit - 100) + " " + "y" * 400 + " "  # two messages' worth, then a tool call
    host = RecordingHost(reply_with=lambda _: "Done.", piece_delay=0.15, preamble=preamble)
    async with PLATFORMS[name](host, monkeypatch) as platform:
        shown = await answered(platform, host, "Done.")

    assert shown == ["Done."]
    assert len(platform.first_posts()) == 2 and platform.deletes() == 1


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_tool_calls_progress_shows_until_the_reply_replaces_it(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = RecordingHost(reply_with=lambda _: "Done.", piece_delay=0.05, progress="fetch: 1/2 (reading)")
    async with PLATFORMS[name](host, monkeypatch) as platform:
        shown = await answered(platform, host, "Done.")

    assert shown == ["Done."]
    assert platform.first_posts() == ["(fetch: 1/2 (reading))"]  # posted while the tool ran, then edited


# PTB 22 warns whenever it builds a RetryAfter (a 429) unless PTB_TIMEDELTA is set; the channel handles both types.
@pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)
async def test_telegram_pauses_its_edits_for_as_long_as_a_429_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    host = RecordingHost(reply_with=lambda _: WORDS, piece_delay=0.02)  # about 0.6 s of writing
    async with FakeTelegram() as fake:
        fake.fail("editMessageText", how="429", retry_after=1)
        spec = TelegramSpec(token=fake.token, api_base_url=fake.api_base_url, **STREAMING)
        async with running(TelegramChannel(host.agent, spec), host):
            fake.send_text("go", user_id=ALICE)
            await wait_until(lambda: fake.visible(ALICE) == [WORDS], "the reply", 10)

    # one refused edit, then none until the second asked for is over: the final edit
    assert len(fake.calls_to("editMessageText")) == 2 and len(fake.edits) == 1


async def test_telegram_edits_a_group_at_most_every_three_seconds() -> None:
    channel = TelegramChannel("bot", TelegramSpec(token="1:x", stream=True, stream_edit_seconds=0.5))
    assert channel.stream_edit_every(TelegramTarget(ALICE, None)) == 0.5
    assert channel.stream_edit_every(TelegramTarget(-100123, None)) == 3.0
    assert (
        TelegramChannel("bot", TelegramSpec(token="1:x")).stream_edit_every(TelegramTarget(ALICE, None))
        is None
    )


def test_stream_settings_are_checked_where_they_are_written() -> None:
    text = "channels:\n  telegram: {token: t, stream: true, stream_edit_seconds: 0}\n"
    with pytest.raises(ConfigError) as refused:
        parse_agent(Path("bot.yaml"), text=text, env={})
    assert "bot.yaml:2:" in str(refused.value) and "greater than 0" in str(refused.value)
    spec = parse_agent(Path("bot.yaml"), text="channels:\n  discord: {token: t, stream: true}\n", env={})
    assert spec.channels.discord is not None and spec.channels.discord.stream_edit_seconds == 1.5
