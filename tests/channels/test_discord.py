"""The Discord channel: real discord.py against the fake Discord (gateway + REST) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import discord
import pytest

from agentd.channels.base import Channel
from agentd.channels.discord import DiscordChannel, DiscordRefused
from agentd.channels.registry import build_channel
from agentd.config.discord import DiscordSpec
from agentd.events import InboundEvent, Reply
from testkit.channel_host import RecordingHost
from testkit.fake_discord import FakeDiscord
from testkit.waiting import wait_until

# Fast timings for a fake on loopback: no 2 s wait for guilds, quick retries and reconnects.
FAST = {
    "guild_ready_timeout": 0.05,
    "send_retry_delays": (0.05, 0.1),
    "reconnect_backoff": (0.05, 0.2),
}


@dataclass
class World:
    fake: FakeDiscord
    guild: int
    general: int
    random: int
    alice: int
    bob: int


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # The channel points discord.py's class-level endpoints at the fake; put them back afterwards.
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    server = FakeDiscord(heartbeat_ms=200)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    guild = fake.add_guild("home")
    return World(
        fake=fake,
        guild=guild,
        general=fake.add_text_channel(guild, "general"),
        random=fake.add_text_channel(guild, "random"),
        alice=fake.add_user("alice"),
        bob=fake.add_user("bob"),
    )


Start = Callable[..., Awaitable[tuple[DiscordChannel, RecordingHost, "asyncio.Task[None]"]]]


@pytest.fixture
async def start(fake: FakeDiscord) -> AsyncIterator[Start]:
    running: list[tuple[DiscordChannel, asyncio.Task[None]]] = []

    async def _start(
        host: RecordingHost | None = None,
        *,
        wait: bool = True,
        token: str | None = None,
        options: dict[str, Any] | None = None,
        **spec_fields: Any,
    ) -> tuple[DiscordChannel, RecordingHost, asyncio.Task[None]]:
        host = host or RecordingHost()
        spec = DiscordSpec(
            token=token or fake.token,
            api_base_url=fake.api_base_url,
            gateway_url=fake.gateway_url,
            **spec_fields,
        )
        channel = DiscordChannel(host.agent, spec, **{**FAST, **(options or {})})
        task = asyncio.create_task(channel.run(host))
        running.append((channel, task))
        if wait:
            await wait_until(lambda: host.last_status("discord") == "running" or task.done())
            assert not task.done(), task.exception()
        return channel, host, task

    yield _start
    for channel, task in running:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)


class ScriptedHost(RecordingHost):
    """A RecordingHost that answers with a fixed text, or raises for a given text."""

    def __init__(self, reply_text: str | None = None, raise_on: str | None = None):
        super().__init__()
        self.reply_text = reply_text
        self.raise_on = raise_on

    async def dispatch(self, event: InboundEvent, sink: object = None) -> Reply:
        if event.text == self.raise_on:
            raise RuntimeError("engine bug")
        reply = await super().dispatch(event)
        if reply.duplicate or self.reply_text is None:
            return reply
        return Reply(text=self.reply_text, conversation_key=reply.conversation_key, run_id=reply.run_id)


# ---- a message in, the reply out -------------------------------------------------------------


async def test_mention_in_a_channel_is_answered_in_that_channel(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start()
    msg_id = await fake.user_message(world.general, world.alice, "hello there", mention_bot=True)

    [sent] = await fake.wait_for_sent(1)
    assert sent.channel_id == world.general
    assert sent.content == f"[discord:{world.general} #1] you said: hello there"
    # answers that message, and may not ping anyone whatever the agent writes
    assert sent.reference is not None and str(sent.reference["message_id"]) == str(msg_id)
    assert sent.allowed_mentions is not None and sent.allowed_mentions["parse"] == []
    assert not sent.allowed_mentions.get("replied_user")

    [event] = host.events
    assert event.agent == "bot" and event.channel == "discord"
    assert event.conversation_key == f"discord:{world.general}"
    assert event.text == "hello there"  # the mention is stripped
    assert event.user_id == str(world.alice) and event.event_id == str(msg_id)
    assert event.metadata["guild_id"] == str(world.guild)
    assert event.metadata["channel_id"] == str(world.general)
    assert event.metadata["is_dm"] is False
    assert event.sent_at == discord.utils.snowflake_time(msg_id).timestamp()  # when Discord says it was sent


async def test_typing_shows_while_the_turn_runs(world: World, start: Start) -> None:
    fake = world.fake
    await start(RecordingHost(reply_delay=0.3))
    await fake.dm(world.alice, "think hard")
    await fake.wait_for(lambda: fake.typing == [fake.dm_channel_id(world.alice)])
    assert fake.sent == []  # still thinking
    await fake.wait_for_sent(1)


async def test_channel_is_built_by_the_registry_and_fits_the_channel_protocol(world: World) -> None:
    channel = build_channel("discord", "bot", DiscordSpec(token="t"))
    assert isinstance(channel, DiscordChannel) and isinstance(channel, Channel)
    assert channel.name == "discord"


async def test_server_messages_need_a_mention_but_dms_do_not(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start()
    await fake.user_message(world.general, world.alice, "talking among ourselves")
    await fake.dm(world.alice, "hi in private")
    await fake.wait_for_sent(1)
    await fake.user_message(world.general, world.alice, "now you", mention_bot=True)
    await fake.wait_for_sent(2)

    assert [e.text for e in host.events] == ["hi in private", "now you"]
    dm_reply = fake.sent[0]
    assert dm_reply.channel_id == fake.dm_channel_id(world.alice)
    assert dm_reply.reference is None


async def test_respond_to_all_answers_every_server_message_with_its_content(
    world: World, start: Start
) -> None:
    fake = world.fake
    _, host, _ = await start(respond_to="all")
    await fake.user_message(world.general, world.alice, "no mention here")
    [sent] = await fake.wait_for_sent(1)
    # the fake blanks content for clients without the message-content intent: this proves we ask for it
    assert host.events[0].text == "no mention here"
    assert sent.content.endswith("you said: no mention here")


async def test_bots_and_its_own_messages_are_ignored(world: World, start: Start) -> None:
    fake = world.fake
    other_bot = fake.add_user("otherbot", bot=True)
    _, host, _ = await start(respond_to="all")
    await fake.user_message(world.general, other_bot, "beep")
    await fake.user_message(world.general, world.alice, "one")
    await fake.wait_for_sent(1)  # the fake echoes this reply back over the gateway, as Discord does
    await fake.user_message(world.general, world.alice, "two")
    await fake.wait_for_sent(2)
    assert [e.text for e in host.events] == ["one", "two"]
    assert len(fake.sent) == 2


async def test_commands_pass_through_as_text(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start()
    await fake.user_message(world.general, world.alice, "/status", mention_bot=True)
    await fake.wait_for_sent(1)
    assert host.events[0].text == "/status"


# ---- conversation keys -------------------------------------------------------------------------


async def test_a_thread_has_its_own_conversation(world: World, start: Start) -> None:
    fake = world.fake
    old_thread = await fake.add_thread(world.general, "from before")  # arrives in GUILD_CREATE
    _, host, _ = await start()
    new_thread = await fake.add_thread(world.general, "made while running")  # arrives as THREAD_CREATE

    await fake.user_message(world.general, world.alice, "in the channel", mention_bot=True)
    await fake.wait_for_sent(1)
    await fake.user_message(new_thread, world.alice, "in the new thread", mention_bot=True)
    await fake.wait_for_sent(2)
    await fake.user_message(old_thread, world.alice, "in the old thread", mention_bot=True)
    await fake.wait_for_sent(3)
    await fake.user_message(new_thread, world.alice, "again", mention_bot=True)
    await fake.wait_for_sent(4)

    assert [(s.channel_id, s.content.split("]")[0]) for s in fake.sent] == [
        (world.general, f"[discord:{world.general} #1"),
        (new_thread, f"[discord:{new_thread} #1"),
        (old_thread, f"[discord:{old_thread} #1"),
        (new_thread, f"[discord:{new_thread} #2"),
    ]
    thread_event = host.events[1]
    assert thread_event.metadata["thread_id"] == str(new_thread)
    assert thread_event.metadata["parent_channel_id"] == str(world.general)


async def test_dms_are_per_person(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start(per_user=False)
    await fake.dm(world.alice, "hi from alice")
    await fake.wait_for_sent(1)
    await fake.dm(world.bob, "hi from bob")
    await fake.wait_for_sent(2)
    assert [e.conversation_key for e in host.events] == [
        f"discord:dm:{world.alice}",
        f"discord:dm:{world.bob}",
    ]
    assert [s.channel_id for s in fake.sent] == [
        fake.dm_channel_id(world.alice),
        fake.dm_channel_id(world.bob),
    ]
    assert all(" #1]" in s.content for s in fake.sent)
    assert host.events[0].metadata["is_dm"] is True and host.events[0].metadata["guild_id"] is None


async def test_per_user_splits_a_channel_by_person(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start(per_user=True)
    await fake.user_message(world.general, world.alice, "a", mention_bot=True)
    await fake.wait_for_sent(1)
    await fake.user_message(world.general, world.bob, "b", mention_bot=True)
    await fake.wait_for_sent(2)
    await fake.dm(world.alice, "c")
    await fake.wait_for_sent(3)
    assert [e.conversation_key for e in host.events] == [
        f"discord:{world.general}:user:{world.alice}",
        f"discord:{world.general}:user:{world.bob}",
        f"discord:dm:{world.alice}",  # DMs are already per person: no suffix
    ]


async def test_a_message_delivered_twice_is_answered_once(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start()
    first = await fake.user_message(world.general, world.alice, "once", mention_bot=True)
    await fake.wait_for_sent(1)
    await fake.redeliver(first)
    await fake.user_message(world.general, world.alice, "next", mention_bot=True)
    await fake.wait_for_sent(2)
    assert [e.text for e in host.events] == ["once", "next"]
    assert [s.content.split("you said: ")[1] for s in fake.sent] == ["once", "next"]


# ---- sending -----------------------------------------------------------------------------------


async def test_a_long_reply_is_split_at_2000_keeping_the_code_block_whole(world: World, start: Start) -> None:
    fake = world.fake
    code_lines = [f"value_{i} = {i}" for i in range(120)]
    long_text = "Here is the plan. " * 80 + "\n\n```python\n" + "\n".join(code_lines) + "\n```\nThat is all."
    assert len(long_text) > 2000
    _, _, _ = await start(ScriptedHost(reply_text=long_text))
    msg_id = await fake.user_message(world.general, world.alice, "write code", mention_bot=True)
    await fake.wait_for(lambda: any("That is all." in s.content for s in fake.sent))

    chunks = [s.content for s in fake.sent]
    assert len(chunks) >= 2
    assert all(len(c) <= 2000 for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks)  # every chunk renders its code on its own
    assert sum(c.count("value_") for c in chunks) == len(code_lines)  # nothing lost or repeated
    assert fake.sent[0].reference is not None and str(fake.sent[0].reference["message_id"]) == str(msg_id)
    assert all(s.reference is None for s in fake.sent[1:])


async def test_a_429_is_waited_out_and_the_reply_delivered_once(world: World, start: Start) -> None:
    fake = world.fake
    await start()
    fake.rate_limit_next_send(retry_after=0.3)
    await fake.user_message(world.general, world.alice, "are you there", mention_bot=True)
    await fake.wait_for_sent(1)

    limited, delivered = fake.attempts
    assert (limited.status, delivered.status) == (429, 200)
    assert delivered.at - limited.at >= 0.28  # retry_after honoured
    await fake.user_message(world.general, world.alice, "next", mention_bot=True)
    await fake.wait_for_sent(2)
    assert [s.content.split("you said: ")[1] for s in fake.sent] == ["are you there", "next"]


async def test_a_transient_server_error_is_retried(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start()
    fake.fail_next_send(503)
    await fake.user_message(world.general, world.alice, "hi", mention_bot=True)
    await fake.wait_for_sent(1)
    assert [a.status for a in fake.attempts] == [503, 200]
    assert host.audits == []


async def test_a_send_whose_answer_was_lost_is_retried_without_posting_twice(
    world: World, start: Start
) -> None:
    fake = world.fake
    await start()
    fake.lose_next_send_response()
    await fake.user_message(world.general, world.alice, "hi", mention_bot=True)
    await fake.wait_for(lambda: [a.status for a in fake.attempts] == [0, 200])
    # the retry carried the same nonce, and Discord (the fake) kept only the first copy
    await fake.user_message(world.general, world.alice, "next", mention_bot=True)
    await fake.wait_for_sent(2)
    assert [s.content.split("you said: ")[1] for s in fake.sent] == ["hi", "next"]


async def test_a_reply_that_cannot_be_sent_is_audited_and_the_channel_goes_on(
    world: World, start: Start
) -> None:
    fake = world.fake
    _, host, _ = await start()
    fake.fail_next_send(403)  # e.g. the bot lost permission to write there: no retry helps
    await fake.user_message(world.general, world.alice, "hi", mention_bot=True)
    await wait_until(lambda: len(host.audits) == 1)
    fake.fail_next_send(503, times=3)  # transient, but it never recovers within the retries
    await fake.user_message(world.general, world.alice, "again", mention_bot=True)
    await wait_until(lambda: len(host.audits) == 2)
    await fake.user_message(world.general, world.alice, "still there?", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)

    assert sent.content.endswith("you said: still there?")
    forbidden, flaky = host.audits
    assert forbidden["kind"] == "channel" and forbidden["action"] == "send_failed"
    assert forbidden["conversation_key"] == f"discord:{world.general}"
    assert "Forbidden" in forbidden["data"]["error"]
    assert forbidden["data"]["part"] == 1 and forbidden["data"]["parts"] == 1
    assert "DiscordServerError" in flaky["data"]["error"]
    assert [a.status for a in fake.attempts] == [403, 503, 503, 503, 200]


async def test_a_handler_error_is_logged_and_the_channel_goes_on(
    world: World, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake = world.fake
    await start(ScriptedHost(raise_on="boom"))
    await fake.user_message(world.general, world.alice, "boom", mention_bot=True)
    await wait_until(lambda: "engine bug" in caplog.text)
    await fake.user_message(world.general, world.alice, "fine", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)
    assert sent.content.endswith("you said: fine")


# ---- connection ------------------------------------------------------------------------------


@pytest.mark.parametrize("abrupt", [False, True], ids=["close-frame", "tcp-cut"])
async def test_a_dropped_gateway_reconnects_and_answers_again(
    world: World, start: Start, abrupt: bool
) -> None:
    fake = world.fake
    _, host, _ = await start()
    await fake.drop_connections(abrupt=abrupt)
    await fake.wait_for(lambda: fake.resumes + fake.identifies >= 2 and fake.connected() == 1)
    await wait_until(lambda: host.last_status("discord") == "running" and len(host.statuses) > 2)
    await fake.user_message(world.general, world.alice, "after the drop", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)
    assert sent.content.endswith("you said: after the drop")
    assert ("discord", "reconnecting", None) in host.statuses


async def test_a_silent_gateway_is_noticed_and_replaced(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start(options={"heartbeat_timeout": 1.0})
    fake.go_silent()  # open socket, no heartbeat ACKs, no events: a zombie connection
    await fake.wait_for(lambda: fake.disconnects >= 1 and fake.connected() == 1, timeout=8.0)
    await fake.user_message(world.general, world.alice, "hello again", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)
    assert sent.content.endswith("you said: hello again")
    assert ("discord", "reconnecting", None) in host.statuses
    assert host.last_status("discord") == "running"


async def test_a_bad_token_marks_the_channel_failed_and_leaves_others_running(
    world: World, start: Start
) -> None:
    fake = world.fake
    _, good_host, _ = await start(RecordingHost(agent="good"))
    _, bad_host, bad_task = await start(RecordingHost(agent="bad"), wait=False, token="not-the-token")

    with pytest.raises(DiscordRefused, match="token"):
        await asyncio.wait_for(bad_task, 5.0)
    channel, status, reason = bad_host.statuses[-1]
    assert (channel, status) == ("discord", "failed") and reason is not None and "token" in reason

    await fake.user_message(world.general, world.alice, "still here?", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)
    assert sent.content.endswith("you said: still here?")
    assert good_host.last_status("discord") == "running"


async def test_a_token_revoked_while_running_fails_the_channel(world: World, start: Start) -> None:
    fake = world.fake
    _, host, task = await start()
    fake.refuse_token()
    await fake.drop_connections()  # the RESUME that follows is closed with 4004
    with pytest.raises(DiscordRefused, match="4004"):
        await asyncio.wait_for(task, 5.0)
    assert host.last_status("discord") == "failed"


async def test_stop_is_quick_and_lets_an_inflight_reply_out(world: World, start: Start) -> None:
    fake = world.fake
    channel, host, task = await start(RecordingHost(reply_delay=0.3))
    await fake.user_message(world.general, world.alice, "slow one", mention_bot=True)
    await host.wait_for_events(1)

    began = time.monotonic()
    await channel.stop()
    await asyncio.wait_for(task, 2.0)
    assert time.monotonic() - began < 2.0
    assert [s.content.split("you said: ")[1] for s in fake.sent] == ["slow one"]
    assert host.last_status("discord") == "stopped"
    await fake.wait_for(lambda: fake.connected() == 0)


# ---- permissions -------------------------------------------------------------------------------


async def test_a_guild_outside_allowed_guilds_is_denied_and_audited(world: World, start: Start) -> None:
    fake = world.fake
    other_guild = fake.add_guild("elsewhere")
    elsewhere = fake.add_text_channel(other_guild, "lobby")
    _, host, _ = await start(allowed_guilds=[str(world.guild)])
    await fake.user_message(elsewhere, world.alice, "let me in", mention_bot=True)
    await wait_until(lambda: len(host.audits) == 1)
    await fake.dm(world.bob, "and a dm")  # DMs would bypass the guild list: closed unless allowed_users
    await wait_until(lambda: len(host.audits) == 2)
    await fake.user_message(world.general, world.alice, "home", mention_bot=True)
    [sent] = await fake.wait_for_sent(1)

    assert sent.channel_id == world.general
    assert [e.text for e in host.events] == ["home"]
    guild_denial, dm_denial = host.audits
    assert (guild_denial["kind"], guild_denial["action"]) == ("permission", "denied")
    assert guild_denial["conversation_key"] == f"discord:{elsewhere}"
    assert guild_denial["data"]["channel"] == "discord"
    assert guild_denial["data"]["user_id"] == str(world.alice)
    assert "allowed_guilds" in guild_denial["data"]["reason"]
    assert dm_denial["conversation_key"] == f"discord:dm:{world.bob}"


async def test_a_user_outside_allowed_users_is_denied_and_audited(world: World, start: Start) -> None:
    fake = world.fake
    _, host, _ = await start(allowed_users=[str(world.alice)])
    denied_id = await fake.user_message(world.general, world.bob, "me too", mention_bot=True)
    await wait_until(lambda: len(host.audits) == 1)
    await fake.dm(world.alice, "just me")
    [sent] = await fake.wait_for_sent(1)

    assert sent.channel_id == fake.dm_channel_id(world.alice)
    [denial] = host.audits
    assert denial["data"] == {
        "channel": "discord",
        "user_id": str(world.bob),
        "reason": "user not in allowed_users",
        "guild_id": str(world.guild),
        "channel_id": str(world.general),
        "message_id": str(denied_id),
    }
    assert [e.user_id for e in host.events] == [str(world.alice)]
