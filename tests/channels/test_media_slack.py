"""Files on Slack: real slack-bolt and slack-sdk against the fake Slack (files behind
url_private_download and the bot token, uploads by files.getUploadURLExternal +
files.completeUploadExternal), with a host that takes files the way the engine does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from agentd.channels.slack import SlackChannel, route_message
from agentd.channels.slack_files import attachments_of
from agentd.config.slack import SlackSpec
from agentd.events import MediaTooLarge, OutgoingFile
from testkit.fake_slack import FakeSlack
from testkit.waiting import wait_until
from tests.channels.media_support import PDF, MediaHost, png

DM = "D0ALICE"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@contextlib.asynccontextmanager
async def running(fake: FakeSlack, host: MediaHost) -> AsyncIterator[SlackChannel]:
    spec = SlackSpec(bot_token=fake.bot_token, app_token=fake.app_token, api_base_url=fake.api_url)
    channel = SlackChannel("bot", spec)
    task = asyncio.create_task(channel.run(host))
    try:
        await fake.wait_for_connections(1)
        await wait_until(lambda: host.last_status("slack") == "running", "the channel")
        yield channel
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)


def in_dm(fake: FakeSlack, text: str, files: list[dict[str, Any]]) -> dict[str, Any]:
    return fake.file_message_event(text, files, channel=DM, channel_type="im")


async def test_a_shared_image_is_fetched_with_the_bot_token(fake: FakeSlack) -> None:
    screenshot = png(40, 30)
    host = MediaHost()
    async with running(fake, host):
        item = fake.file_object(screenshot, "screenshot.png", "image/png")
        await fake.push_event(in_dm(fake, "what does this error mean?", [item]))
        await fake.wait_for_posts(1)

    [event] = host.events
    assert event.text == "what does this error mean?"
    [image] = event.attachments
    assert (image.kind, image.mime_type, image.filename, image.size) == (
        "image",
        "image/png",
        "screenshot.png",
        len(screenshot),
    )
    assert host.fetched == [[screenshot]]
    [(path, authorised)] = fake.downloads
    assert authorised and path.endswith("/download/screenshot.png")  # url_private_download, Bearer token


async def test_a_voice_clip_and_a_pdf_in_one_message_are_two_attachments(fake: FakeSlack) -> None:
    clip = b"\x1aE\xdf\xa3" + bytes(300)  # a WebM header, as Slack records clips
    host = MediaHost()
    async with running(fake, host):
        files = [
            fake.file_object(clip, "audio_message.webm", "audio/webm", subtype="slack_audio"),
            fake.file_object(PDF, "invoice.pdf", "application/pdf"),
        ]
        await fake.push_event(in_dm(fake, "", files))
        await fake.wait_for_posts(1)

    [event] = host.events
    assert event.text == ""
    assert [(a.kind, a.filename) for a in event.attachments] == [
        ("audio", "audio_message.webm"),
        ("document", "invoice.pdf"),
    ]
    assert host.fetched == [[clip, PDF]]


async def test_a_file_shared_with_a_mention_is_answered_when_slack_sends_no_app_mention(
    fake: FakeSlack,
) -> None:
    # Slack at times delivers a channel message that shares a file and names the bot only as a
    # `message` event (slackapi/bolt-python#925); with both events it is still answered once
    host = MediaHost()
    async with running(fake, host):
        item = fake.file_object(png(), "graph.png", "image/png")
        alone = fake.file_message_event(f"<@{fake.bot_user_id}> explain this graph", [item])
        await fake.push_event(alone)
        [post] = await fake.wait_for_posts(1)
        twice = fake.file_message_event(f"<@{fake.bot_user_id}> and this one", [item])
        await fake.push_event(twice)
        mention = fake.mention_event("and this one", ts=twice["ts"])
        await fake.push_event({**mention, "files": [item]})
        await fake.wait_for_posts(2)
        await asyncio.sleep(0.1)

    assert post["thread_ts"] == alone["ts"]
    assert [e.text for e in host.events] == ["explain this graph", "and this one"]
    assert len(fake.posts) == 2 and host.fetched == [[png()], [png()]]
    plain = fake.message_event(f"<@{fake.bot_user_id}> no file", channel="C0GENERAL")
    assert (
        route_message(
            plain, bot_user_id=fake.bot_user_id, respond_to="mentions", threads=True, per_user=False
        )
        is None
    )


async def test_a_file_declared_too_large_is_refused_without_a_download(fake: FakeSlack) -> None:
    host = MediaHost(max_bytes=100)
    async with running(fake, host):
        await fake.push_event(
            in_dm(fake, "look", [fake.file_object(bytes(5000), "big.bin", "application/zip")])
        )
        await fake.wait_for_posts(1)
    [[refused]] = host.fetched
    assert isinstance(refused, MediaTooLarge) and refused.limit == 100
    assert fake.downloads == []


async def test_a_file_larger_than_declared_is_cut_off_at_the_limit(fake: FakeSlack) -> None:
    item = fake.file_object(bytes(5000), "liar.txt", "text/plain", declared_size=10)
    [attachment] = attachments_of({"files": [item]}, fake.bot_token, None)
    assert attachment.download is not None
    with pytest.raises(MediaTooLarge):
        await attachment.download(100)
    assert len(fake.downloads) == 1


async def test_slacks_sign_in_page_is_never_taken_for_the_file(fake: FakeSlack) -> None:
    # A token without access gets a 200 HTML page from Slack, not an error: that page is not the image.
    item = fake.file_object(png(), "photo.png", "image/png")
    [attachment] = attachments_of({"files": [item]}, "xoxb-a-token-slack-does-not-know", None)
    assert attachment.download is not None
    with pytest.raises(ConnectionError, match="HTML page"):
        await attachment.download(1 << 20)
    assert fake.downloads == [(item["url_private_download"].split("files-pri/")[1], False)]


async def test_a_bot_token_without_the_file_scopes_is_said_in_the_log_at_start(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    fake.scopes = ["app_mentions:read", "chat:write", "im:history"]
    async with running(fake, MediaHost()):
        pass
    [warning] = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert "['files:read', 'files:write']" in warning and "cannot be read" in warning


async def test_a_bot_token_with_the_file_scopes_starts_without_a_word(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(fake, MediaHost()):
        pass
    assert not [r for r in caplog.records if "lacks" in r.getMessage()]


async def test_deleted_files_are_not_attachments(fake: FakeSlack) -> None:
    gone = {"id": "F0GONE", "mode": "tombstone"}
    assert attachments_of({"files": [gone]}, fake.bot_token, None) == ()


async def test_a_file_shared_over_slack_connect_is_looked_up_with_files_info(fake: FakeSlack) -> None:
    host = MediaHost()
    photo = png(12, 12)
    async with running(fake, host):
        stub = fake.connect_stub(fake.file_object(photo, "from-partner.png", "image/png"))
        await fake.push_event(in_dm(fake, "from our partner", [stub]))
        await fake.wait_for_posts(1)

    [event] = host.events
    [attachment] = event.attachments
    assert attachment.kind == "file" and attachment.size is None  # nothing known until files.info
    assert host.fetched == [[photo]]
    [info] = fake.calls_to("files.info")
    assert info.params["file"] == stub["id"] and info.token == fake.bot_token


async def test_a_slack_connect_file_slack_will_not_describe_is_a_connection_error(fake: FakeSlack) -> None:
    stub = {"id": "F0NOSUCH", "mode": "file_access", "file_access": "check_file_info"}
    web = AsyncWebClient(token=fake.bot_token, base_url=fake.api_url)
    [attachment] = attachments_of({"files": [stub]}, fake.bot_token, web)
    assert attachment.download is not None
    with pytest.raises(ConnectionError, match=r"files\.info refused: file_not_found"):
        await attachment.download(1000)
    assert fake.downloads == []


async def test_a_reply_with_a_file_is_uploaded_into_the_thread_after_its_text(fake: FakeSlack) -> None:
    chart = png(8, 8)
    host = MediaHost(
        reply_files=[OutgoingFile("chart.png", "image/png", chart)], reply_with=lambda e: "the chart"
    )
    async with running(fake, host):
        mention = fake.mention_event("chart please")
        await fake.push_event(mention)
        [shared] = await fake.wait_for_shared(1)

    [post] = fake.posts
    assert post["text"] == "the chart" and post["thread_ts"] == mention["ts"]
    assert (shared.filename, shared.data) == ("chart.png", chart)
    assert (shared.channel, shared.thread_ts) == ("C0GENERAL", mention["ts"])
    methods = [c.method for c in fake.calls if c.method.startswith(("chat.", "files."))]
    assert methods == ["chat.postMessage", "files.getUploadURLExternal", "files.completeUploadExternal"]


async def test_a_failed_upload_is_said_in_the_thread_and_audited(fake: FakeSlack) -> None:
    host = MediaHost(
        reply_files=[OutgoingFile("chart.png", "image/png", png())], reply_with=lambda e: "the chart"
    )
    fake.fail_next("files.getUploadURLExternal", count=10, status=500)
    async with running(fake, host):
        mention = fake.mention_event("chart please")
        await fake.push_event(mention)
        await fake.wait_for_posts(2)

    assert fake.posts[1]["text"] == "(I could not send chart.png: the upload failed.)"
    assert fake.posts[1]["thread_ts"] == mention["ts"] and fake.shared_files == []
    [audit] = host.audits
    assert (audit["kind"], audit["action"]) == ("channel", "file_failed")
    assert audit["data"]["filename"] == "chart.png" and audit["data"]["bytes"] == len(png())
