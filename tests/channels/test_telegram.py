"""The Telegram channel end to end: real python-telegram-bot against the fake Bot API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from agentd.channels.base import Channel, HttpChannel
from agentd.channels.splitting import split_message
from agentd.channels.telegram import MESSAGE_LIMIT, NETWORK_RETRIES, TelegramChannel
from agentd.config.telegram import TelegramSpec
from agentd.events import COMMANDS, InboundEvent, Reply
from testkit.channel_host import RecordingHost
from testkit.fake_telegram import FakeTelegram
from testkit.serving import serve_on_loopback
from testkit.waiting import wait_until
from tests.channels.support import assert_refused, errors_logged

# PTB 22 warns whenever it builds a RetryAfter (a 429) unless PTB_TIMEDELTA is set; the channel handles both types.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)

ALICE, BOB = 1111, 2222
COMMAND_NAMES = {"compact", "new", "reset", "status", "approve", "deny", "jobs", "help"}
GROUP = -1001234567890


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
def host() -> RecordingHost:
    return RecordingHost(agent="bot")


def statuses(host: RecordingHost) -> list[str]:
    return [status for channel, status, _ in host.statuses if channel == "telegram"]


@contextlib.asynccontextmanager
async def running(
    fake: FakeTelegram, host: RecordingHost, *, token: str | None = None, **fields: Any
) -> AsyncIterator[TelegramChannel]:
    spec = TelegramSpec(token=token or fake.token, api_base_url=fake.api_base_url, **fields)
    channel = TelegramChannel("bot", spec)
    channel.retry_base = 0.05
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(
            lambda: host.last_status("telegram") == "running" or task.done(), "the channel to start"
        )
        yield channel
    finally:
        await channel.stop()
        await asyncio.wait_for(task, 5.0)


# -- polling ---------------------------------------------------------------------------------------


async def test_a_private_message_is_answered_in_the_same_chat(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with running(fake, host) as channel:
        assert isinstance(channel, Channel)
        update = fake.send_text("hello there", user_id=ALICE)
        sent = await fake.wait_for_sent(1)

    assert sent[0]["chat_id"] == ALICE
    assert sent[0]["text"] == f"[telegram:{ALICE} #1] you said: hello there"
    assert "message_thread_id" not in sent[0]
    [event] = host.events
    message_id = update["message"]["message_id"]
    assert event == InboundEvent(
        agent="bot",
        conversation_key=f"telegram:{ALICE}",
        text="hello there",
        channel="telegram",
        user_id=str(ALICE),
        event_id=f"{ALICE}:{message_id}",
        metadata={"chat_id": ALICE, "message_id": message_id, "topic": None},
        sent_at=event.sent_at,
    )
    assert event.sent_at is not None and abs(event.sent_at - time.time()) < 60  # the message's own date
    assert statuses(host) == ["starting", "running", "stopped"]
    assert fake.calls_to("deleteWebhook"), "polling starts by removing any webhook"


async def test_commands_are_registered_at_start(fake: FakeTelegram, host: RecordingHost) -> None:
    async with running(fake, host):
        pass
    assert {c["command"] for c in fake.commands} == COMMAND_NAMES
    assert all(c["description"] for c in fake.commands)
    # the menu is the engine's command table (agentd.events.COMMANDS), not a list of its own
    assert [(c["command"], c["description"]) for c in fake.commands] == list(COMMANDS.items())


async def test_typing_is_shown_while_a_turn_runs(fake: FakeTelegram) -> None:
    slow_host = RecordingHost(agent="bot", reply_delay=0.3)
    async with running(fake, slow_host):
        fake.send_text(
            "@agentd_test_bot think hard", chat_id=GROUP, chat_type="supergroup", user_id=ALICE, thread_id=9
        )
        await fake.wait_for_sent(1)
    [action] = fake.calls_to("sendChatAction")
    assert action == {"chat_id": GROUP, "action": "typing", "message_thread_id": 9}


async def test_each_forum_topic_is_its_own_conversation(fake: FakeTelegram, host: RecordingHost) -> None:
    async with running(fake, host, respond_to="all"):
        fake.send_text("in topic five", chat_id=GROUP, chat_type="supergroup", user_id=ALICE, thread_id=5)
        fake.send_text("in topic seven", chat_id=GROUP, chat_type="supergroup", user_id=ALICE, thread_id=7)
        fake.send_text("in the general chat", chat_id=GROUP, chat_type="supergroup", user_id=ALICE)
        sent = await fake.wait_for_sent(3)

    keys = {event.text: event.conversation_key for event in host.events}
    assert keys == {
        "in topic five": f"telegram:{GROUP}:topic:5",
        "in topic seven": f"telegram:{GROUP}:topic:7",
        "in the general chat": f"telegram:{GROUP}",
    }
    threads = {msg["text"].split(": ", 1)[1]: msg.get("message_thread_id") for msg in sent}
    assert threads == {"in topic five": 5, "in topic seven": 7, "in the general chat": None}
    assert all(msg["chat_id"] == GROUP for msg in sent)
    assert {e.metadata["topic"] for e in host.events} == {5, 7, None}


async def test_private_chats_are_per_person_and_groups_per_user_when_asked(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with running(fake, host, respond_to="all", per_user=True):
        fake.send_text("hi from alice", user_id=ALICE)
        fake.send_text("hi from bob", user_id=BOB)
        fake.send_text("alice in the group", chat_id=GROUP, chat_type="supergroup", user_id=ALICE)
        fake.send_text("bob in the group", chat_id=GROUP, chat_type="supergroup", user_id=BOB)
        fake.send_text("bob in a topic", chat_id=GROUP, chat_type="supergroup", user_id=BOB, thread_id=3)
        await fake.wait_for_sent(5)

    keys = {event.text: event.conversation_key for event in host.events}
    assert keys == {
        "hi from alice": f"telegram:{ALICE}",
        "hi from bob": f"telegram:{BOB}",
        "alice in the group": f"telegram:{GROUP}:user:{ALICE}",
        "bob in the group": f"telegram:{GROUP}:user:{BOB}",
        "bob in a topic": f"telegram:{GROUP}:topic:3:user:{BOB}",
    }
    assert {e.user_id for e in host.events} == {str(ALICE), str(BOB)}
    assert all(e.sent_at is not None and abs(e.sent_at - time.time()) < 60 for e in host.events)


async def test_in_groups_only_mentions_and_replies_to_the_bot_are_answered(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    group = {"chat_id": GROUP, "chat_type": "supergroup", "user_id": ALICE}
    async with running(fake, host):  # respond_to: mentions (the default)
        fake.send_text("just chatting among humans", **group)
        fake.send_text("hey @someone_else look", **group)
        # the bot created this topic: messages in it are not replies to the bot
        fake.send_text("talking in the bot's topic", thread_id=4, topic_creator_id=fake.bot_id, **group)
        fake.send_text("@agentd_test_bot, what is the time?", **group)
        fake.send_text("and what about you @Agentd_Test_Bot", **group)
        fake.send_text("a reply to the bot", reply_to_bot=True, **group)
        fake.send_text("a direct message needs no mention", user_id=BOB)
        sent = await fake.wait_for_sent(4)
        # everything above was delivered in one batch; one more round trip proves nothing else is coming
        fake.send_text("@agentd_test_bot last", **group)
        await fake.wait_for_sent(5)

    assert [e.text for e in host.events][:4] == [
        "what is the time?",
        "and what about you",
        "a reply to the bot",
        "a direct message needs no mention",
    ]
    assert len(host.events) == 5
    assert len(sent) == 5


async def test_respond_to_all_answers_every_group_message(fake: FakeTelegram, host: RecordingHost) -> None:
    async with running(fake, host, respond_to="all"):
        fake.send_text("no mention at all", chat_id=GROUP, chat_type="group", user_id=ALICE)
        await fake.wait_for_sent(1)
    assert host.events[0].text == "no mention at all"


async def test_commands_pass_through_as_text_without_the_bot_name(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    group = {"chat_id": GROUP, "chat_type": "supergroup", "user_id": ALICE}
    async with running(fake, host):
        fake.send_text("/status@agentd_test_bot", **group)
        fake.send_text("/compact@otherbot", **group)  # addressed to another bot in the group
        fake.send_text("/new", **group)  # a bare command in a group is for every bot, us included
        fake.send_text("/help", user_id=BOB)
        await fake.wait_for_sent(3)
        fake.send_text("/reset@AGENTD_TEST_BOT now please", **group)
        await fake.wait_for_sent(4)

    assert [e.text for e in host.events] == ["/status", "/new", "/help", "/reset now please"]


class EchoingDuplicatesHost(RecordingHost):
    """Like an engine that hands back the earlier answer for a repeat: the channel must still send nothing."""

    async def dispatch(self, event: InboundEvent, sink: object = None) -> Reply:
        reply = await super().dispatch(event)
        if reply.duplicate:
            return Reply(text="the earlier answer", conversation_key=reply.conversation_key, duplicate=True)
        return reply


async def test_a_message_delivered_twice_is_answered_once(fake: FakeTelegram) -> None:
    host = EchoingDuplicatesHost(agent="bot")
    async with running(fake, host):
        first = fake.send_text("only once please", user_id=ALICE)
        fake.redeliver(first)
        fake.send_text("next", user_id=ALICE)
        sent = await fake.wait_for_sent(2)

    assert [m["text"] for m in sent] == [
        f"[telegram:{ALICE} #1] you said: only once please",
        f"[telegram:{ALICE} #2] you said: next",
    ]
    assert len(fake.calls_to("getUpdates")) >= 2


async def test_a_long_reply_is_split_at_the_telegram_limit(fake: FakeTelegram, host: RecordingHost) -> None:
    words = " ".join(f"word{i}" for i in range(1500))  # about 13,000 characters
    expected = split_message(f"[telegram:{ALICE} #1] you said: {words}", MESSAGE_LIMIT)
    assert len(expected) >= 3
    async with running(fake, host):
        fake.send_text(words, user_id=ALICE)
        sent = await fake.wait_for_sent(len(expected))
        fake.send_text("short", user_id=ALICE)
        await fake.wait_for_sent(len(expected) + 1)

    assert [m["text"] for m in sent[: len(expected)]] == expected
    assert all(len(m["text"]) <= MESSAGE_LIMIT for m in sent)
    assert " ".join(m["text"].strip() for m in sent[: len(expected)]).endswith("word1498 word1499")
    assert len(sent) == len(expected) + 1


async def test_a_flood_limit_is_waited_out_and_the_reply_sent(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with running(fake, host):
        fake.fail("sendMessage", how="429", retry_after=1)
        fake.send_text("hello", user_id=ALICE)
        await fake.wait_for_calls("sendMessage", 1)
        refused_at = time.monotonic()
        sent = await fake.wait_for_sent(1)
        waited = time.monotonic() - refused_at

    assert len(fake.calls_to("sendMessage")) == 2
    assert sent[0]["text"].endswith("you said: hello")
    assert waited >= 0.9, "the retry must come after retry_after"
    assert not host.audits


async def test_a_group_upgraded_to_a_supergroup_is_answered_at_its_new_id(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    old_group, supergroup = -4001, -1004001
    async with running(fake, host, respond_to="all"):
        fake.fail("sendMessage", how="migrate", migrate_to=supergroup)
        fake.send_text("hello", chat_id=old_group, chat_type="group", user_id=ALICE)
        await fake.wait_for_sent(1)
        fake.send_text("again", chat_id=old_group, chat_type="group", user_id=ALICE)
        await fake.wait_for_sent(2)

    assert [m["chat_id"] for m in fake.sent] == [supergroup, supergroup]
    # the refused first try, its resend, and the next reply straight to the new id
    assert [c["chat_id"] for c in fake.calls_to("sendMessage")] == [old_group, supergroup, supergroup]
    assert not host.audits


async def test_transient_send_failures_are_retried(fake: FakeTelegram, host: RecordingHost) -> None:
    async with running(fake, host):
        fake.fail("sendMessage", 1, how="drop")
        fake.fail("sendMessage", 1, how="502")
        fake.send_text("hello", user_id=ALICE)
        await fake.wait_for_sent(1)
    assert len(fake.calls_to("sendMessage")) == 3
    assert not host.audits


async def test_a_reply_that_cannot_be_sent_is_audited(fake: FakeTelegram, host: RecordingHost) -> None:
    async with running(fake, host):
        fake.fail("sendMessage", 1 + NETWORK_RETRIES, how="502")
        fake.send_text("hello", user_id=ALICE)
        await wait_until(lambda: bool(host.audits), "the send_failed audit")
        # the bot keeps working afterwards
        fake.send_text("again", user_id=ALICE)
        await fake.wait_for_sent(1)

    [audit] = host.audits
    assert (audit["kind"], audit["action"]) == ("channel", "send_failed")
    assert audit["conversation_key"] == f"telegram:{ALICE}"
    assert audit["data"]["chat_id"] == str(ALICE)
    assert "Bad Gateway" in audit["data"]["error"]
    assert fake.sent[0]["text"].endswith("you said: again")


async def test_polling_survives_a_lost_connection_and_recovers(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with running(fake, host):
        await fake.wait_for_calls("getUpdates", 1)
        polls_before = len(fake.calls_to("getUpdates"))
        fake.fail("getUpdates", 1, how="drop")  # the held long poll loses its connection
        fake.fail("getUpdates", 1, how="502")  # and the next poll hits a bad gateway
        await wait_until(lambda: host.last_status("telegram") == "reconnecting", "status reconnecting")
        fake.send_text("are you back?", user_id=ALICE)
        sent = await fake.wait_for_sent(1, timeout=10)
        assert host.last_status("telegram") == "running"
        assert len(fake.calls_to("getUpdates")) >= polls_before + 2

    assert sent[0]["text"].endswith("you said: are you back?")
    assert statuses(host) == ["starting", "running", "reconnecting", "running", "stopped"]
    _, _, why = host.statuses[2]
    assert why


async def test_start_up_retries_when_telegram_is_unreachable(fake: FakeTelegram, host: RecordingHost) -> None:
    fake.fail("getMe", 2, how="drop")
    async with running(fake, host):
        fake.send_text("hello", user_id=ALICE)
        await fake.wait_for_sent(1)
    assert statuses(host)[:3] == ["starting", "reconnecting", "running"]
    assert len(fake.calls_to("getMe")) == 3


async def test_a_bad_token_fails_the_channel_alone(fake: FakeTelegram, host: RecordingHost) -> None:
    bad_token = "999:not-the-right-token"
    spec = TelegramSpec(token=bad_token, api_base_url=fake.api_base_url)
    channel = TelegramChannel("bot", spec)
    started = time.monotonic()
    await asyncio.wait_for(channel.run(host), 5.0)  # returns instead of raising: nothing else is affected

    assert time.monotonic() - started < 3
    channel_name, status, why = host.statuses[-1]
    assert (channel_name, status) == ("telegram", "failed")
    assert why and "token" in why and bad_token not in why
    assert fake.calls_to("getMe") and not fake.calls_to("getUpdates")
    await channel.stop()  # stopping a failed channel is harmless


async def test_a_token_revoked_while_polling_fails_the_channel(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    spec = TelegramSpec(token=fake.token, api_base_url=fake.api_base_url)
    channel = TelegramChannel("bot", spec)
    task = asyncio.create_task(channel.run(host))
    await wait_until(lambda: host.last_status("telegram") == "running", "running")
    await fake.wait_for_calls("getUpdates", 1)
    fake.revoke_token()
    await asyncio.wait_for(task, 5.0)  # the run ends on its own

    _, status, why = host.statuses[-1]
    assert status == "failed"
    assert why and "token" in why
    await channel.stop()


async def test_messages_from_outside_the_allow_lists_are_ignored_and_audited(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with running(fake, host, allowed_users=[ALICE], allowed_chats=[str(ALICE), str(GROUP)]):
        fake.send_text("let me in", user_id=BOB)
        fake.send_text("@agentd_test_bot hello", chat_id=-100999, chat_type="supergroup", user_id=ALICE)
        fake.send_text("hi", user_id=ALICE)
        sent = await fake.wait_for_sent(1)
        await wait_until(lambda: len(host.audits) == 2, "two denials")

    assert [m["chat_id"] for m in sent] == [ALICE]
    assert [e.user_id for e in host.events] == [str(ALICE)]
    reasons = {(a["kind"], a["action"], a["data"]["user_id"], a["data"]["reason"]) for a in host.audits}
    assert reasons == {
        ("permission", "denied", str(BOB), "user not in allowed_users"),
        ("permission", "denied", str(ALICE), "chat not in allowed_chats"),
    }


async def test_a_failing_turn_does_not_stop_the_bot(fake: FakeTelegram) -> None:
    class FlakyHost(RecordingHost):
        async def dispatch(self, event: InboundEvent, sink: object = None) -> Reply:
            if event.text == "boom":
                raise RuntimeError("the engine fell over")
            return await super().dispatch(event)

    host = FlakyHost(agent="bot")
    async with running(fake, host):
        fake.send_text("boom", user_id=ALICE)
        fake.send_text("still there?", user_id=ALICE)
        sent = await fake.wait_for_sent(1)
    assert sent[0]["text"].endswith("you said: still there?")


async def test_stop_is_quick_even_with_a_long_poll_held(fake: FakeTelegram, host: RecordingHost) -> None:
    spec = TelegramSpec(token=fake.token, api_base_url=fake.api_base_url, poll_timeout=30)
    channel = TelegramChannel("bot", spec)
    task = asyncio.create_task(channel.run(host))
    await wait_until(lambda: host.last_status("telegram") == "running", "running")
    await fake.wait_for_calls("getUpdates", 1)

    started = time.monotonic()
    await channel.stop()
    assert task.done()
    assert time.monotonic() - started < 2.0
    assert host.last_status("telegram") == "stopped"
    await task


async def test_stop_gives_an_in_flight_turn_time_to_reply(fake: FakeTelegram) -> None:
    host = RecordingHost(agent="bot", reply_delay=0.3)
    async with running(fake, host):
        fake.send_text("answer before you go", user_id=ALICE)
        await host.wait_for_events(1)
    assert fake.sent and fake.sent[0]["text"].endswith("you said: answer before you go")


async def test_stop_cancels_a_turn_that_outlasts_the_drain(fake: FakeTelegram) -> None:
    host = RecordingHost(agent="bot", reply_delay=60)
    spec = TelegramSpec(token=fake.token, api_base_url=fake.api_base_url)
    channel = TelegramChannel("bot", spec)
    channel.drain_seconds = 0.2
    task = asyncio.create_task(channel.run(host))
    await wait_until(lambda: host.last_status("telegram") == "running", "running")
    fake.send_text("a very long turn", user_id=ALICE)
    await host.wait_for_events(1)

    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 2.0
    assert task.done() and host.last_status("telegram") == "stopped"
    assert not fake.sent
    await task


# -- webhook -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def webhook_channel(
    fake: FakeTelegram, host: RecordingHost, **fields: Any
) -> AsyncIterator[tuple[TelegramChannel, str]]:
    """A channel in webhook mode, its handle_http served by uvicorn on 127.0.0.1 like the daemon does."""
    api = Starlette()
    async with serve_on_loopback(api) as base_url:
        url = f"{base_url}/telegram/bot"
        spec = TelegramSpec(
            token=fake.token,
            api_base_url=fake.api_base_url,
            mode="webhook",
            secret_token="s3cret-Token_1",
            webhook_url=url,
            **fields,
        )
        channel = TelegramChannel("bot", spec)
        assert isinstance(channel, HttpChannel)
        api.add_route(channel.http_path, channel.handle_http, methods=["POST"])
        run_task = asyncio.create_task(channel.run(host))
        try:
            await wait_until(lambda: host.last_status("telegram") == "running", "the channel to start")
            yield channel, url
        finally:
            await channel.stop()
            await asyncio.wait_for(run_task, 5.0)


async def test_webhook_registers_with_the_secret_and_answers_a_post(
    fake: FakeTelegram, host: RecordingHost
) -> None:
    async with webhook_channel(fake, host) as (channel, url):
        assert channel.http_path == "/telegram/bot"
        assert fake.webhook is not None
        assert fake.webhook["url"] == url
        assert fake.webhook["secret_token"] == "s3cret-Token_1"
        update = fake.message_update("hello over webhook", user_id=ALICE)
        response = await fake.deliver_webhook(update)
        assert response.status_code == 200
        sent = await fake.wait_for_sent(1)

    assert sent[0] == {"chat_id": ALICE, "text": f"[telegram:{ALICE} #1] you said: hello over webhook"}
    assert not fake.calls_to("getUpdates") and not fake.calls_to("deleteWebhook")
    assert {c["command"] for c in fake.commands} == COMMAND_NAMES


async def test_webhook_refuses_a_missing_or_wrong_secret(fake: FakeTelegram, host: RecordingHost) -> None:
    async with webhook_channel(fake, host) as (_, url):
        update = fake.message_update("let me in", user_id=ALICE)
        async with httpx.AsyncClient() as client:
            missing = await client.post(url, json=update)
        wrong = await fake.deliver_webhook(update, secret_token="s3cret-Token_2")
        # a message that does get through afterwards is the first one the host sees
        await fake.deliver_webhook(fake.message_update("the real one", user_id=ALICE))
        await fake.wait_for_sent(1)

    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert missing.json() == {"error": "X-Telegram-Bot-Api-Secret-Token is missing or wrong"}
    assert [e.text for e in host.events] == ["the real one"]


SECRET = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-Token_1"}
A_DATE = {"message_id": 1, "date": 1700000000}
# What reaches the webhook that is not a good update: each is refused with a 4xx and a reason.
NOT_AN_UPDATE: dict[str, tuple[bytes, dict[str, str], int, str]] = {
    "no secret, junk body": (b"\xff junk", {}, 403, "Secret-Token is missing or wrong"),
    "wrong secret, good update": (
        json.dumps({"update_id": 1}).encode(),
        {"X-Telegram-Bot-Api-Secret-Token": "guess"},
        403,
        "Secret-Token is missing or wrong",
    ),
    "broken JSON": (b'{"update_id": 1, "message": ', SECRET, 400, "not JSON"),
    "not UTF-8": (b"\xff\xfe{}", SECRET, 400, "not UTF-8"),
    "JSON list": (b"[1, 2]", SECRET, 400, "not an object (a list)"),
    "no update_id": (b'{"message": {}}', SECRET, 400, "no integer `update_id`"),
    "update_id a string": (b'{"update_id": "7"}', SECRET, 400, "no integer `update_id`"),
    "message a string": (b'{"update_id": 7, "message": "hi"}', SECRET, 400, "not a Telegram update"),
    "message without a date": (
        json.dumps(
            {"update_id": 7, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}}}
        ).encode(),
        SECRET,
        400,
        "not a Telegram update",
    ),
    "chat a number": (
        json.dumps({"update_id": 7, "message": A_DATE | {"chat": 5}}).encode(),
        SECRET,
        400,
        "not a Telegram update",
    ),
    "too large": (b"{" + b" " * (1 << 20) + b"}", SECRET, 413, "the limit is 1048576"),
}


@pytest.mark.parametrize("case", NOT_AN_UPDATE, ids=list(NOT_AN_UPDATE))
async def test_webhook_junk_is_a_4xx_with_a_reason_never_a_500(
    fake: FakeTelegram, host: RecordingHost, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    body, headers, status, reason = NOT_AN_UPDATE[case]
    async with webhook_channel(fake, host) as (_, url), httpx.AsyncClient() as client:
        response = await client.post(
            url, content=body, headers=headers | {"Content-Type": "application/json"}
        )
        # the bot goes on answering good updates
        await fake.deliver_webhook(fake.message_update("still here", user_id=ALICE))
        await fake.wait_for_sent(1)

    assert_refused(response, status, reason)
    assert [e.text for e in host.events] == ["still here"]
    assert not errors_logged(caplog)


async def test_webhook_update_that_parses_but_makes_no_sense_is_acknowledged_and_ignored(
    fake: FakeTelegram, host: RecordingHost, caplog: pytest.LogCaptureFixture
) -> None:
    text_not_text = fake.message_update("placeholder", user_id=ALICE)
    text_not_text["message"]["text"] = {"not": "text"}
    no_chat = fake.message_update("from nowhere", user_id=ALICE)
    del no_chat["message"]["chat"]
    async with webhook_channel(fake, host):
        for odd in (text_not_text, no_chat):
            assert (await fake.deliver_webhook(odd)).status_code == 200
        await fake.deliver_webhook(fake.message_update("barrier", user_id=ALICE))
        await fake.wait_for_sent(1)

    assert [e.text for e in host.events] == ["barrier"]
    assert not errors_logged(caplog)


async def test_webhook_before_the_channel_runs_is_503_but_a_wrong_secret_is_still_403(
    fake: FakeTelegram,
) -> None:
    api = Starlette()
    async with serve_on_loopback(api) as base_url, httpx.AsyncClient() as client:
        url = f"{base_url}/telegram/bot"
        spec = TelegramSpec(token=fake.token, mode="webhook", secret_token="s3cret-Token_1", webhook_url=url)
        channel = TelegramChannel("bot", spec)
        api.add_route(channel.http_path, channel.handle_http, methods=["POST"])
        update = fake.message_update("early", user_id=ALICE)
        early = await client.post(url, json=update, headers=SECRET)
        forged = await client.post(url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "guess"})

    assert (early.status_code, forged.status_code) == (503, 403)
    assert early.json() == {"error": "telegram channel not running"}


async def test_webhook_redelivery_is_answered_once(fake: FakeTelegram) -> None:
    host = EchoingDuplicatesHost(agent="bot")
    async with webhook_channel(fake, host):
        update = fake.message_update("once", user_id=ALICE)
        await fake.deliver_webhook(update)
        await fake.deliver_webhook(update)  # Telegram retries when it thinks the first POST failed
        await fake.deliver_webhook(fake.message_update("twice", user_id=ALICE))
        sent = await fake.wait_for_sent(2)
    assert [m["text"] for m in sent] == [
        f"[telegram:{ALICE} #1] you said: once",
        f"[telegram:{ALICE} #2] you said: twice",
    ]


async def test_only_webhook_mode_is_an_http_channel(fake: FakeTelegram) -> None:
    polling = TelegramChannel("bot", TelegramSpec(token=fake.token))
    assert isinstance(polling, Channel)
    assert not isinstance(polling, HttpChannel)


def test_webhook_mode_needs_a_secret_and_a_url() -> None:
    with pytest.raises(ValueError, match="secret_token"):
        TelegramSpec(token="1:x", mode="webhook", webhook_url="https://example.org/telegram/bot")
    with pytest.raises(ValueError, match="webhook_url"):
        TelegramSpec(token="1:x", mode="webhook", secret_token="abc")
    with pytest.raises(ValueError, match="secret_token must be"):
        TelegramSpec(token="1:x", secret_token="has spaces")
    assert TelegramSpec(token="1:x", allowed_users=[12, "34"]).allowed_users == ["12", "34"]
