"""The Slack channel: real slack-bolt against a fake Slack on 127.0.0.1 (Web API, Socket Mode, signed HTTP events)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from agentd.channels.base import Channel, HttpChannel
from agentd.channels.slack import SlackChannel, SlackRefused, route_message
from agentd.config.slack import SlackSpec
from agentd.events import InboundEvent, Reply
from testkit.channel_host import RecordingHost
from testkit.fake_slack import FakeSlack
from testkit.serving import serve_on_loopback
from testkit.waiting import wait_until
from tests.channels.support import assert_refused, errors_logged

GENERAL = "C0GENERAL"


class CountingHost(RecordingHost):
    """RecordingHost that also counts the repeats it refused, so a test can wait for one."""

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        self.duplicates: list[InboundEvent] = []

    async def dispatch(self, event: InboundEvent, sink: object = None) -> Reply:
        reply = await super().dispatch(event)
        if reply.duplicate:
            self.duplicates.append(event)
        return reply


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def socket_spec(fake: FakeSlack, **over: Any) -> SlackSpec:
    fields: dict[str, Any] = {
        "bot_token": fake.bot_token,
        "app_token": fake.app_token,
        "api_base_url": fake.api_url,
    }
    return SlackSpec(**(fields | over))


@contextlib.asynccontextmanager
async def running(channel: SlackChannel, host: RecordingHost) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(channel.run(host))
    try:
        yield task
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


async def connected(fake: FakeSlack, host: RecordingHost, n: int = 1) -> None:
    await fake.wait_for_connections(n)
    await wait_until(lambda: host.last_status("slack") == "running")


def thread_of(post: dict[str, Any]) -> str | None:
    return post.get("thread_ts")


# -- Socket Mode ------------------------------------------------------------------------------------------


async def test_mention_in_channel_gets_reply_in_its_thread(fake: FakeSlack) -> None:
    host = RecordingHost()
    channel = SlackChannel("bot", socket_spec(fake))
    assert isinstance(channel, Channel) and not isinstance(channel, HttpChannel)
    async with running(channel, host):
        await connected(fake, host)
        event = fake.mention_event("hello there")
        envelope = await fake.push_event(event)
        await fake.wait_for_ack(envelope)
        [post] = await fake.wait_for_posts(1)

    ts = event["ts"]
    [inbound] = host.events
    assert inbound.conversation_key == f"slack:{GENERAL}:{ts}"
    assert inbound.text == "hello there"
    assert (inbound.channel, inbound.user_id, inbound.event_id) == ("slack", "U0ALICE", f"{GENERAL}:{ts}")
    assert inbound.metadata == {"team": fake.team_id, "channel": GENERAL, "ts": ts, "thread_ts": ts}
    assert inbound.sent_at == float(ts)  # when it was sent, as Slack says: episodes carry it
    assert post["channel"] == GENERAL and thread_of(post) == ts
    assert post["text"] == f"[slack:{GENERAL}:{ts} #1] you said: hello there"
    assert ("slack", "stopped", None) == host.statuses[-1]


async def test_each_thread_is_its_own_conversation(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        first, second = fake.mention_event("one"), fake.mention_event("two")
        await fake.push_event(first)
        await fake.wait_for_posts(1)
        await fake.push_event(second)
        await fake.wait_for_posts(2)
        await fake.push_event(fake.mention_event("again", thread_ts=first["ts"]))
        posts = await fake.wait_for_posts(3)

    keys = [e.conversation_key for e in host.events]
    assert keys == [f"slack:{GENERAL}:{first['ts']}", f"slack:{GENERAL}:{second['ts']}", keys[0]]
    assert [thread_of(p) for p in posts] == [first["ts"], second["ts"], first["ts"]]
    assert posts[2]["text"].startswith(f"[slack:{GENERAL}:{first['ts']} #2]")


async def test_threads_off_keys_by_channel_and_replies_at_top_level(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake, threads=False)), host):
        await connected(fake, host)
        await fake.push_event(fake.mention_event("one"))
        await fake.wait_for_posts(1)
        await fake.push_event(fake.mention_event("two"))
        posts = await fake.wait_for_posts(2)

    assert [e.conversation_key for e in host.events] == [f"slack:{GENERAL}"] * 2
    assert [thread_of(p) for p in posts] == [None, None]
    assert posts[1]["text"].startswith(f"[slack:{GENERAL} #2]")


async def test_direct_messages_are_per_person_and_need_no_mention(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake, per_user=True)), host):
        await connected(fake, host)
        await fake.push_event(fake.message_event("hi", channel="D0ALICE", user="U0ALICE", channel_type="im"))
        await fake.wait_for_posts(1)
        await fake.push_event(fake.message_event("hi", channel="D0BOB", user="U0BOB", channel_type="im"))
        await fake.wait_for_posts(2)
        # per_user splits a shared channel thread by speaker
        top = fake.mention_event("in general", user="U0BOB")
        await fake.push_event(top)
        posts = await fake.wait_for_posts(3)

    assert [e.conversation_key for e in host.events] == [
        "slack:D0ALICE",
        "slack:D0BOB",
        f"slack:{GENERAL}:{top['ts']}:user:U0BOB",
    ]
    assert [(p["channel"], thread_of(p)) for p in posts] == [
        ("D0ALICE", None),
        ("D0BOB", None),
        (GENERAL, top["ts"]),
    ]


async def test_commands_pass_through_as_text(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        await fake.push_event(fake.mention_event("/status"))
        await fake.push_event(fake.message_event("/reset", channel="D0ALICE", channel_type="im"))
        await fake.wait_for_posts(2)

    assert sorted(e.text for e in host.events) == ["/reset", "/status"]


async def test_unmentioned_bot_and_edited_messages_are_ignored(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        ignored = [
            fake.message_event("no mention here"),
            fake.message_event("from another bot", channel_type="im", bot_id="B0OTHER"),
            fake.message_event("our own echo", channel_type="im", user=fake.bot_user_id),
            fake.message_event("edited", channel_type="im", subtype="message_changed"),
        ]
        for event in ignored:
            await fake.wait_for_ack(await fake.push_event(event))
        await fake.push_event(fake.mention_event("barrier"))
        await fake.wait_for_posts(1)

    assert [e.text for e in host.events] == ["barrier"]
    assert len(fake.posts) == 1


async def test_respond_to_all_answers_plain_messages_and_mention_plus_message_once(fake: FakeSlack) -> None:
    host = CountingHost()
    async with running(SlackChannel("bot", socket_spec(fake, respond_to="all")), host):
        await connected(fake, host)
        plain = fake.message_event("no mention needed")
        await fake.push_event(plain)
        await fake.wait_for_posts(1)
        # Slack sends both a message and an app_mention event for one message that mentions the bot
        both = fake.message_event(f"<@{fake.bot_user_id}> hi")
        await fake.push_event(both)
        await fake.push_event(fake.mention_event("hi", ts=both["ts"]))
        await wait_until(lambda: host.duplicates)
        await fake.push_event(fake.mention_event("barrier"))
        await fake.wait_for_posts(3)

    assert [e.text for e in host.events] == ["no mention needed", "hi", "barrier"]
    assert [d.event_id for d in host.duplicates] == [f"{GENERAL}:{both['ts']}"]
    assert len(fake.posts) == 3


async def test_long_reply_is_split_into_thread_messages(fake: FakeSlack) -> None:
    host = RecordingHost()
    text = "\n\n".join(f"paragraph {i} " + "x" * 900 for i in range(9))
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        event = fake.mention_event(text)
        await fake.push_event(event)
        await wait_until(lambda: len(fake.posts) >= 3)
        await fake.push_event(fake.mention_event("barrier"))
        await wait_until(lambda: any("barrier" in p["text"] for p in fake.posts))

    parts = [p for p in fake.posts if "barrier" not in p["text"]]
    assert len(parts) == 3
    assert all(len(p["text"]) <= 3900 and thread_of(p) == event["ts"] for p in parts)
    assert "paragraph 8" in parts[-1]["text"]


async def test_rate_limited_reply_waits_retry_after_then_succeeds(fake: FakeSlack) -> None:
    host = RecordingHost()
    fake.rate_limit_next_post(retry_after=1)
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        await fake.push_event(fake.mention_event("hello"))
        await fake.wait_for_posts(1, timeout=8)

    limited, ok = fake.calls_to("chat.postMessage")
    assert (limited.status, ok.status) == (429, 200)
    assert ok.at - limited.at >= 1.0
    assert not host.audits


async def test_server_errors_are_retried_and_a_final_failure_is_audited(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        fake.fail_next_posts(1, status=500)
        await fake.push_event(fake.mention_event("survives one 500"))
        await fake.wait_for_posts(1, timeout=8)
        fake.fail_next_posts(10, status=503)
        lost = fake.mention_event("never delivered")
        await fake.push_event(lost)
        await wait_until(lambda: host.audits, timeout=10)

    [audit] = host.audits
    assert (audit["kind"], audit["action"]) == ("channel", "send_failed")
    assert audit["conversation_key"] == f"slack:{GENERAL}:{lost['ts']}"
    assert "503" in audit["data"]["error"] or "fatal_error" in audit["data"]["error"]
    assert len(fake.posts) == 1


async def test_dropped_socket_is_reconnected(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake), reconnect_base=0.05), host):
        await connected(fake, host)
        await fake.drop_sockets()
        await fake.wait_for_connections(2)
        await wait_until(lambda: host.last_status("slack") == "running")
        await fake.push_event(fake.mention_event("still there?"))
        [post] = await fake.wait_for_posts(1)

    assert "still there?" in post["text"]
    states = [s for _, s, _ in host.statuses]
    assert states[states.index("reconnecting") - 1 : states.index("reconnecting") + 2] == [
        "running",
        "reconnecting",
        "running",
    ]
    assert len(fake.calls_to("apps.connections.open")) == 2  # a fresh URL for the new connection


async def test_slack_asking_for_a_refresh_gets_a_new_connection(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with running(SlackChannel("bot", socket_spec(fake)), host):
        await connected(fake, host)
        await fake.request_refresh()
        await fake.wait_for_connections(2)
        await fake.push_event(fake.mention_event("after refresh"))
        await fake.wait_for_posts(1)

    assert "reconnecting" not in [s for _, s, _ in host.statuses]


async def test_slack_unavailable_at_start_is_retried_with_backoff(fake: FakeSlack) -> None:
    host = RecordingHost()
    # the client retries a 500 twice by itself, so three failures cost our loop one round
    fake.fail_next("apps.connections.open", 3, status=500)
    async with running(SlackChannel("bot", socket_spec(fake), reconnect_base=0.05), host):
        await connected(fake, host)
        await fake.push_event(fake.mention_event("hello"))
        await fake.wait_for_posts(1)

    assert [s for _, s, _ in host.statuses][:3] == ["starting", "reconnecting", "running"]


@pytest.mark.parametrize("token", ["bot_token", "app_token"])
async def test_refused_token_fails_this_channel_only(fake: FakeSlack, token: str) -> None:
    bad_host, good_host = RecordingHost(), RecordingHost()
    bad = SlackChannel(
        "bad", socket_spec(fake, **{token: "xoxb-wrong" if token == "bot_token" else "xapp-wrong"})
    )
    async with running(SlackChannel("good", socket_spec(fake)), good_host):
        started = time.monotonic()
        with pytest.raises(SlackRefused, match="invalid_auth"):
            await asyncio.wait_for(bad.run(bad_host), 5)
        assert time.monotonic() - started < 2
        await connected(fake, good_host)
        await fake.push_event(fake.mention_event("hello"))
        await fake.wait_for_posts(1)

    channel, status, reason = bad_host.statuses[-1]
    assert (channel, status) == ("slack", "failed")
    assert reason is not None and "invalid_auth" in reason
    assert good_host.events and not bad_host.events


async def test_users_and_channels_outside_the_allow_lists_are_denied_and_audited(fake: FakeSlack) -> None:
    host = RecordingHost()
    spec = socket_spec(fake, respond_to="all", allowed_users=["U0ALICE"], allowed_channels=[GENERAL])
    async with running(SlackChannel("bot", spec), host):
        await connected(fake, host)
        stranger = fake.message_event(f"<@{fake.bot_user_id}> let me in", user="U0MALLORY")
        await fake.push_event(stranger)
        await fake.push_event(fake.mention_event("let me in", user="U0MALLORY", ts=stranger["ts"]))
        elsewhere = fake.mention_event("psst", channel="C0RANDOM")
        await fake.push_event(elsewhere)
        await wait_until(lambda: len(host.audits) >= 2)
        await fake.push_event(fake.mention_event("allowed"))
        await fake.wait_for_posts(1)
        await wait_until(lambda: len(fake.acks) >= 4)

    assert [e.text for e in host.events] == ["allowed"]
    denied = sorted(host.audits, key=lambda a: a["data"]["reason"])
    assert [(a["kind"], a["action"]) for a in denied] == [("permission", "denied")] * 2
    assert [a["data"]["reason"] for a in denied] == [
        "channel not in allowed_channels",
        "user not in allowed_users",
    ]
    assert denied[1]["data"]["user_id"] == "U0MALLORY"
    assert denied[0]["conversation_key"] == f"slack:C0RANDOM:{elsewhere['ts']}"


async def test_stop_is_quick_even_with_a_turn_in_flight(fake: FakeSlack) -> None:
    host = RecordingHost(reply_delay=30)
    channel = SlackChannel("bot", socket_spec(fake), stop_grace=0.5)
    task = asyncio.create_task(channel.run(host))
    await connected(fake, host)
    await fake.push_event(fake.mention_event("slow one"))
    await host.wait_for_events(1)

    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 2.0
    assert task.done() and task.exception() is None
    assert host.statuses[-1] == ("slack", "stopped", None)
    await wait_until(lambda: fake.open_sockets == 0)
    assert not fake.posts


# -- Events API over HTTP ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def http_app(channel: SlackChannel) -> AsyncIterator[str]:
    """Serve the channel's handle_http on a real uvicorn on loopback; yields the events URL."""
    app = Starlette(routes=[Route(channel.http_path, channel.handle_http, methods=["POST"])])
    async with serve_on_loopback(app) as base_url:
        yield base_url + channel.http_path


def http_spec(fake: FakeSlack) -> SlackSpec:
    return SlackSpec(bot_token=fake.bot_token, signing_secret=fake.signing_secret, api_base_url=fake.api_url)


@contextlib.asynccontextmanager
async def http_channel(fake: FakeSlack, host: RecordingHost) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    channel = SlackChannel("helper", http_spec(fake))
    assert isinstance(channel, HttpChannel) and channel.http_path == "/slack/helper/events"
    async with http_app(channel) as url, running(channel, host), httpx.AsyncClient(timeout=5) as client:
        await wait_until(lambda: host.last_status("slack") == "running")
        yield client, url


async def test_http_event_gets_reply_in_thread(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with http_channel(fake, host) as (client, url):
        event = fake.mention_event("over http")
        body, headers = fake.signed_request(fake.event_callback(event))
        response = await client.post(url, content=body, headers=headers)
        assert response.status_code == 200
        [post] = await fake.wait_for_posts(1)

    assert host.events[0].conversation_key == f"slack:{GENERAL}:{event['ts']}"
    assert post["channel"] == GENERAL and thread_of(post) == event["ts"]
    assert "over http" in post["text"]


async def test_http_bad_signature_or_stale_timestamp_is_401(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with http_channel(fake, host) as (client, url):
        payload = fake.event_callback(fake.mention_event("forged"))
        body, headers = fake.signed_request(payload, secret="not-the-secret")
        forged = await client.post(url, content=body, headers=headers)
        body, headers = fake.signed_request(payload, timestamp=int(time.time()) - 600)
        stale = await client.post(url, content=body, headers=headers)

    assert (forged.status_code, stale.status_code) == (401, 401)
    assert "does not match the signing secret" in forged.json()["error"]
    assert "X-Slack-Request-Timestamp is more than 300 s from now" in stale.json()["error"]
    assert not host.events and not fake.posts


Request = Callable[[FakeSlack], tuple[bytes | AsyncIterator[bytes], dict[str, str]]]


def unsigned(body: bytes, **headers: str) -> Request:
    return lambda fake: (body, headers)


def signed(body: dict[str, Any] | bytes) -> Request:
    return lambda fake: fake.signed_request(body)


async def megabytes(n: int) -> AsyncIterator[bytes]:
    """A body sent in chunks, so it declares no content-length."""
    for _ in range(n * 16):
        yield b" " * (1 << 16)


# What reaches the Events API URL that is not a good event: each is refused with a 4xx and a reason.
NOT_AN_EVENT = {
    "unsigned non-JSON": (unsigned(b"\xff\xfe junk"), 401, "not signed"),
    "unsigned event": (
        unsigned(b'{"type": "event_callback"}', **{"Content-Type": "application/json"}),
        401,
        "not signed",
    ),
    "timestamp not a number": (
        unsigned(b"{}", **{"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}),
        401,
        "not a whole number",
    ),
    "signed non-UTF-8": (signed(b"\xff\xfe{}"), 400, "not UTF-8"),
    "signed non-JSON": (signed(b"hello"), 400, "not JSON"),
    "signed JSON list": (signed(b"[1, 2]"), 400, "not an object (a list)"),
    "signed, no type": (signed({"token": "t"}), 400, "no string `type`"),
    "event is a string": (signed({"type": "event_callback", "event": "hi"}), 400, "`event` is not an object"),
    "event is a list": (signed({"type": "event_callback", "event": [1]}), 400, "`event` is not an object"),
    "event without type": (signed({"type": "event_callback", "event": {"text": "hi"}}), 400, "event has no"),
    "challenge missing": (signed({"type": "url_verification"}), 400, "without a string `challenge`"),
    "too large": (signed(b"{" + b" " * (1 << 20) + b"}"), 413, "the limit is 1048576"),
    "too large, streamed": (lambda fake: (megabytes(2), {}), 413, "over the limit of 1048576 bytes"),
}


@pytest.mark.parametrize("case", NOT_AN_EVENT, ids=list(NOT_AN_EVENT))
async def test_http_junk_is_a_4xx_with_a_reason_never_a_500(
    fake: FakeSlack, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    request, status, reason = NOT_AN_EVENT[case]
    host = RecordingHost()
    async with http_channel(fake, host) as (client, url):
        body, headers = request(fake)
        response = await client.post(url, content=body, headers=headers)
        # the channel goes on answering good events
        body, headers = fake.signed_request(fake.event_callback(fake.mention_event("still here")))
        assert (await client.post(url, content=body, headers=headers)).status_code == 200
        await fake.wait_for_posts(1)

    assert_refused(response, status, reason)
    assert [e.text for e in host.events] == ["still here"]
    assert not errors_logged(caplog)


async def test_http_signed_event_with_malformed_fields_is_acknowledged_and_ignored(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    host = RecordingHost()
    async with http_channel(fake, host) as (client, url):
        for bad in ({"channel": 5}, {"user": {"id": "U1"}}, {"ts": None}, {"channel": ""}):
            event = fake.mention_event("malformed") | bad
            body, headers = fake.signed_request(fake.event_callback(event))
            assert (await client.post(url, content=body, headers=headers)).status_code == 200
        body, headers = fake.signed_request(fake.event_callback(fake.mention_event("barrier")))
        await client.post(url, content=body, headers=headers)
        await fake.wait_for_posts(1)

    assert [e.text for e in host.events] == ["barrier"]
    assert not errors_logged(caplog)


async def test_http_url_verification_is_answered(fake: FakeSlack) -> None:
    host = RecordingHost()
    async with http_channel(fake, host) as (client, url):
        body, headers = fake.signed_request({"token": "t", "challenge": "c-123", "type": "url_verification"})
        response = await client.post(url, content=body, headers=headers)

    assert response.status_code == 200
    assert response.json() == {"challenge": "c-123"}


async def test_http_retry_from_slack_is_acknowledged_and_answered_once(fake: FakeSlack) -> None:
    host = CountingHost()
    async with http_channel(fake, host) as (client, url):
        payload = fake.event_callback(fake.mention_event("only once"))
        body, headers = fake.signed_request(payload)
        assert (await client.post(url, content=body, headers=headers)).status_code == 200
        await fake.wait_for_posts(1)
        body, headers = fake.signed_request(payload, retry_num=1)
        assert (await client.post(url, content=body, headers=headers)).status_code == 200
        await wait_until(lambda: host.duplicates)
        body, headers = fake.signed_request(fake.event_callback(fake.mention_event("barrier")))
        await client.post(url, content=body, headers=headers)
        await fake.wait_for_posts(2)

    assert [e.text for e in host.events] == ["only once", "barrier"]
    assert len(fake.posts) == 2


async def test_http_before_the_channel_runs_is_503_but_forged_is_still_401(fake: FakeSlack) -> None:
    channel = SlackChannel("helper", http_spec(fake))
    async with http_app(channel) as url, httpx.AsyncClient(timeout=5) as client:
        body, headers = fake.signed_request(fake.event_callback(fake.mention_event("early")))
        response = await client.post(url, content=body, headers=headers)
        forged = await client.post(url, content=body, headers=headers | {"X-Slack-Signature": "v0=00"})
    assert response.status_code == 503
    assert forged.status_code == 401  # verify first: a stranger learns nothing about our state


# -- routing, without a network ------------------------------------------------------------------------------


def test_route_strips_only_our_mention_and_ignores_other_subtypes() -> None:
    event = {
        "type": "app_mention",
        "user": "U1",
        "channel": "C1",
        "ts": "1.1",
        "text": "<@U0BOT|agentd> hi <@U2>",
    }
    route = route_message(event, bot_user_id="U0BOT", respond_to="mentions", threads=True, per_user=False)
    assert route is not None and route.text == "hi <@U2>"
    deleted = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": "D1",
        "ts": "1.2",
        "channel_type": "im",
    }
    assert route_message(deleted, bot_user_id="U0BOT", respond_to="all", threads=True, per_user=False) is None
