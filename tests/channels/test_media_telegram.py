"""Files on Telegram: real python-telegram-bot against the fake Bot API (getFile, the file URL,
sendPhoto / sendDocument), with a host that takes files the way the engine does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette

from agentd.channels.telegram import TelegramChannel
from agentd.config.telegram import TelegramSpec
from agentd.events import MediaTooLarge, OutgoingFile
from testkit.clock import ManualClock
from testkit.fake_telegram import FakeTelegram
from testkit.serving import serve_on_loopback
from testkit.waiting import wait_until
from tests.channels.media_support import JPEG, OGG, PDF, MediaHost, png

ALICE = 1111
GROUP = -1001234567890


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@contextlib.asynccontextmanager
async def running(fake: FakeTelegram, host: MediaHost, **fields: Any) -> AsyncIterator[TelegramChannel]:
    channel = TelegramChannel("bot", TelegramSpec(token=fake.token, api_base_url=fake.api_base_url, **fields))
    channel.retry_base = 0.01
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(lambda: host.last_status("telegram") == "running" or task.done(), "the channel")
        yield channel
    finally:
        await channel.stop()
        await asyncio.wait_for(task, 5.0)


async def test_a_photo_reaches_the_host_as_an_image_with_the_largest_sizes_bytes(fake: FakeTelegram) -> None:
    host = MediaHost()
    async with running(fake, host):
        update = fake.send_file("photo", JPEG, user_id=ALICE, caption="what is on this receipt?")
        await fake.wait_for_sent(1)

    [event] = host.events
    assert event.text == "what is on this receipt?"  # the caption is the message's text
    [image] = event.attachments
    largest = update["message"]["photo"][-1]
    assert (image.kind, image.mime_type, image.size) == ("image", "image/jpeg", len(JPEG))
    assert host.fetched == [[JPEG]]
    # one getFile, for the largest size only, and one download of its file_path
    assert [c["file_id"] for c in fake.calls_to("getFile")] == [largest["file_id"]]
    assert fake.downloads == [fake.files[largest["file_id"]].path]


async def test_a_document_without_a_caption_is_a_message_with_no_text(fake: FakeTelegram) -> None:
    host = MediaHost()
    async with running(fake, host):
        fake.send_file("document", PDF, user_id=ALICE, mime_type="application/pdf", filename="invoice.pdf")
        await fake.wait_for_sent(1)

    [event] = host.events
    assert event.text == ""
    [doc] = event.attachments
    assert (doc.kind, doc.mime_type, doc.filename, doc.size) == (
        "document",
        "application/pdf",
        "invoice.pdf",
        len(PDF),
    )
    assert host.fetched == [[PDF]]


async def test_a_voice_note_and_an_audio_file_are_audio(fake: FakeTelegram) -> None:
    host = MediaHost()
    async with running(fake, host):
        fake.send_file("voice", OGG, user_id=ALICE, mime_type="audio/ogg")
        fake.send_file(
            "audio", b"ID3" + bytes(500), user_id=ALICE, mime_type="audio/mpeg", filename="song.mp3"
        )
        await fake.wait_for_sent(2)

    voice, audio = (event.attachments[0] for event in host.events)
    assert (voice.kind, voice.mime_type, voice.filename) == ("audio", "audio/ogg", "voice.ogg")
    assert (audio.kind, audio.mime_type, audio.filename) == ("audio", "audio/mpeg", "song.mp3")
    assert host.fetched == [[OGG], [b"ID3" + bytes(500)]]


async def test_a_video_and_a_round_video_note_are_files_and_a_videos_caption_is_answered(
    fake: FakeTelegram,
) -> None:
    clip = b"\x00\x00\x00\x18ftypmp42" + bytes(400)
    host = MediaHost()
    async with running(fake, host):
        fake.send_file("video", clip, user_id=ALICE, caption="what happens here?", mime_type="video/mp4")
        fake.send_file("video_note", clip, user_id=ALICE)
        await fake.wait_for_sent(2)

    video, note = host.events
    assert video.text == "what happens here?"  # the caption is not lost with the video
    assert note.text == "" and note.attachments[0].filename == "video_note.mp4"
    assert [(a.kind, a.mime_type) for e in host.events for a in e.attachments] == [("file", "video/mp4")] * 2
    assert host.fetched == [[clip], [clip]]


async def test_a_file_declared_too_large_is_refused_before_getfile(fake: FakeTelegram) -> None:
    host = MediaHost(max_bytes=1000)
    async with running(fake, host):
        fake.send_file(
            "document", bytes(5000), user_id=ALICE, mime_type="application/zip", filename="big.zip"
        )
        await fake.wait_for_sent(1)

    [[refused]] = host.fetched
    assert isinstance(refused, MediaTooLarge) and refused.limit == 1000
    assert fake.calls_to("getFile") == [] and fake.downloads == []  # not one request for it


async def test_a_file_larger_than_its_message_said_is_refused_on_getfiles_size(fake: FakeTelegram) -> None:
    host = MediaHost(max_bytes=1000)
    async with running(fake, host):
        fake.send_file("document", bytes(5000), user_id=ALICE, mime_type="text/plain", declared_size=10)
        await fake.wait_for_sent(1)
    [[refused]] = host.fetched
    assert isinstance(refused, MediaTooLarge)
    assert len(fake.calls_to("getFile")) == 1 and fake.downloads == []


async def test_a_file_over_telegrams_20_mb_is_said_as_telegram_refused_it(fake: FakeTelegram) -> None:
    host = MediaHost(max_bytes=64 << 20)
    async with running(fake, host):
        fake.send_file(
            "document", bytes((20 << 20) + 1), user_id=ALICE, mime_type="video/mp4", filename="v.mp4"
        )
        await fake.wait_for_sent(1)
    [[refused]] = host.fetched
    assert isinstance(refused, ConnectionError) and "file is too big" in str(refused).lower()
    assert fake.token not in str(refused)


async def test_in_a_group_a_photo_is_answered_when_its_caption_mentions_the_bot(fake: FakeTelegram) -> None:
    host = MediaHost()
    group = {"chat_id": GROUP, "chat_type": "supergroup", "user_id": ALICE}
    async with running(fake, host):
        fake.send_file("photo", JPEG, caption="nice view", **group)  # not for the bot
        fake.send_file("photo", JPEG, caption="@agentd_test_bot where is this?", **group)
        await fake.wait_for_sent(1)

    [event] = host.events
    assert event.text == "where is this?" and event.attachments[0].kind == "image"


async def test_a_reply_with_files_sends_the_text_then_a_photo_and_a_document(fake: FakeTelegram) -> None:
    chart = png()
    files = [
        OutgoingFile("chart.png", "image/png", chart),
        OutgoingFile("report.pdf", "application/pdf", PDF),
    ]
    host = MediaHost(reply_files=files, reply_with=lambda event: "here you are")
    async with running(fake, host):
        fake.send_text("make me a chart", user_id=ALICE)
        await wait_until(lambda: len(fake.uploads) == 2, "both uploads")

    order = [c.method for c in fake.calls if c.method in ("sendMessage", "sendPhoto", "sendDocument")]
    assert order == ["sendMessage", "sendPhoto", "sendDocument"]
    photo, document = fake.uploads
    assert (photo.chat_id, photo.data) == (ALICE, chart)
    assert (document.filename, document.data) == ("report.pdf", PDF)
    assert host.audits == []


async def test_an_image_telegram_will_not_show_as_a_photo_goes_as_a_document(fake: FakeTelegram) -> None:
    banner = png(4200, 200)  # a ratio past 20: sendPhoto answers PHOTO_INVALID_DIMENSIONS
    host = MediaHost(
        reply_files=[OutgoingFile("banner.png", "image/png", banner)], reply_with=lambda e: "done"
    )
    async with running(fake, host):
        fake.send_text("a banner please", user_id=ALICE)
        await wait_until(lambda: len(fake.uploads) == 1, "the upload")

    assert [c.method for c in fake.calls if c.method.startswith("send") and c.method != "sendChatAction"] == [
        "sendMessage",
        "sendPhoto",
        "sendDocument",
    ]
    [upload] = fake.uploads
    assert (upload.method, upload.filename, upload.data) == ("sendDocument", "banner.png", banner)
    assert host.audits == []


async def test_a_file_over_the_50_mb_a_bot_may_send_is_refused_without_an_upload(fake: FakeTelegram) -> None:
    huge = OutgoingFile("backup.tar", "application/x-tar", bytes((50 << 20) + 1))
    host = MediaHost(reply_files=[huge], reply_with=lambda e: "here it is")
    async with running(fake, host):
        fake.send_text("the backup please", user_id=ALICE)
        await fake.wait_for_sent(2)
    assert fake.calls_to("sendDocument") == [] and fake.uploads == []
    assert fake.sent[1]["text"] == "(I could not send backup.tar: the upload failed.)"
    [audit] = host.audits
    assert "larger than the 50 MB" in audit["data"]["error"]


async def test_a_failed_upload_is_said_and_audited_and_the_other_files_still_go(fake: FakeTelegram) -> None:
    files = [OutgoingFile("empty.txt", "text/plain", b""), OutgoingFile("chart.png", "image/png", png())]
    host = MediaHost(reply_files=files, reply_with=lambda event: "two files")
    async with running(fake, host):
        fake.send_text("files please", user_id=ALICE)
        await fake.wait_for_sent(2)  # the text, then the notice
        await wait_until(lambda: len(fake.uploads) == 1, "the good upload")

    assert fake.sent[1]["text"] == "(I could not send empty.txt: the upload failed.)"
    assert [u.filename for u in fake.uploads] == ["chart.png"]
    [audit] = host.audits
    assert (audit["kind"], audit["action"]) == ("channel", "file_failed")
    assert audit["data"]["filename"] == "empty.txt" and "non-empty" in audit["data"]["error"]


async def test_a_streamed_reply_sends_its_files_once_it_has_settled(fake: FakeTelegram) -> None:
    chart = png()
    host = MediaHost(
        reply_files=[OutgoingFile("chart.png", "image/png", chart)], reply_with=lambda e: "a b c d"
    )
    async with running(fake, host, stream=True, stream_edit_seconds=0.01):
        fake.send_text("stream me a chart", user_id=ALICE)
        await wait_until(lambda: len(fake.uploads) == 1, "the upload")

    assert fake.visible(ALICE) == ["a b c d"]
    [upload] = fake.uploads
    assert (upload.method, upload.data) == ("sendPhoto", chart)


@contextlib.asynccontextmanager
async def serving_webhook(
    fake: FakeTelegram, api: Starlette, host: MediaHost
) -> AsyncIterator[TelegramChannel]:
    """A channel in webhook mode, its route served on 127.0.0.1 as the daemon serves it."""
    async with serve_on_loopback(api) as base_url:
        spec = TelegramSpec(
            token=fake.token,
            api_base_url=fake.api_base_url,
            mode="webhook",
            secret_token="s3cret-Token_1",
            webhook_url=f"{base_url}/telegram/bot",
        )
        channel = TelegramChannel("bot", spec)
        api.add_route(channel.http_path, channel.handle_http, methods=["POST"])
        task = asyncio.create_task(channel.run(host))
        try:
            await wait_until(lambda: host.last_status("telegram") == "running", "the channel")
            yield channel
        finally:
            await channel.stop()
            await asyncio.wait_for(task, 5.0)


async def test_a_photo_posted_to_the_webhook_is_an_attachment(fake: FakeTelegram) -> None:
    host = MediaHost()
    async with serving_webhook(fake, Starlette(), host):
        response = await fake.deliver_webhook(fake.file_update("photo", JPEG, user_id=ALICE, caption="hi"))
        assert response.status_code == 200
        await fake.wait_for_sent(1)
    assert host.fetched == [[JPEG]] and host.events[0].text == "hi"


# -- albums: several photos sent at once are one message ---------------------------------------------


def album_clock(channel: TelegramChannel) -> ManualClock:
    clock = ManualClock()
    channel.intake.albums.clock = clock
    return clock


async def test_an_album_is_one_message_with_every_photo_in_order(fake: FakeTelegram) -> None:
    host = MediaHost()
    photos = [png(shade=shade) for shade in (10, 20, 30)]
    async with running(fake, host) as channel:
        clock = album_clock(channel)
        fake.send_file("photo", photos[0], user_id=ALICE, caption="which one is best?", media_group_id="A1")
        for photo in photos[1:]:
            fake.send_file("photo", photo, user_id=ALICE, media_group_id="A1")
        await wait_until(lambda: channel.intake.albums.held == 3, "the album's parts")
        assert host.events == []  # held until the album is complete
        clock.advance(1.0)
        await fake.wait_for_sent(1)

    [event] = host.events
    assert event.text == "which one is best?"
    assert host.fetched == [photos]
    assert len(fake.sent) == 1  # one answer, not one per photo


async def test_an_album_waits_while_its_parts_keep_arriving(fake: FakeTelegram) -> None:
    host = MediaHost()
    async with running(fake, host) as channel:
        clock = album_clock(channel)
        fake.send_file("photo", png(shade=1), user_id=ALICE, media_group_id="A2")
        await wait_until(lambda: channel.intake.albums.held == 1, "the first part")
        clock.advance(0.6)
        fake.send_file("photo", png(shade=2), user_id=ALICE, caption="both", media_group_id="A2")
        await wait_until(lambda: channel.intake.albums.held == 2, "the second part")
        clock.advance(0.6)  # past the first part's deadline, not the second's
        await asyncio.sleep(0.05)
        assert host.events == []
        clock.advance(0.5)
        await fake.wait_for_sent(1)
    [event] = host.events
    assert event.text == "both" and len(event.attachments) == 2


async def test_in_a_group_an_album_is_taken_whole_when_its_caption_mentions_the_bot(
    fake: FakeTelegram,
) -> None:
    host = MediaHost()
    group = {"chat_id": GROUP, "chat_type": "supergroup", "user_id": ALICE}
    async with running(fake, host) as channel:
        clock = album_clock(channel)
        fake.send_file(
            "photo", png(shade=5), caption="holiday", media_group_id="G0", **group
        )  # not for the bot
        fake.send_file("photo", png(shade=6), media_group_id="G0", **group)
        fake.send_file(
            "photo", png(shade=7), caption="@agentd_test_bot compare", media_group_id="G1", **group
        )
        fake.send_file("photo", png(shade=8), media_group_id="G1", **group)
        await wait_until(lambda: channel.intake.albums.held == 4, "both albums")
        clock.advance(1.0)
        await fake.wait_for_sent(1)
        await asyncio.sleep(0.05)

    [event] = host.events
    assert event.text == "compare"
    assert host.fetched == [[png(shade=7), png(shade=8)]]


async def test_an_upload_that_fails_when_even_its_notice_cannot_be_sent_is_audited_and_nothing_crashes(
    fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    host = MediaHost(reply_files=[OutgoingFile("empty.txt", "text/plain", b"")], reply_with=lambda e: "")
    async with running(fake, host) as channel:
        fake.fail("sendMessage", times=10, how="500")  # the notice cannot go out either
        fake.send_text("just the file", user_id=ALICE)
        await wait_until(lambda: len(host.audits) == 1, "the audit")
        await wait_until(lambda: not channel._in_flight, "the turn to end")
        fake.send_text("still there?", user_id=ALICE)  # the channel goes on
        await wait_until(lambda: len(host.events) == 2, "the next message")

    assert [(a["action"], a["data"]["filename"]) for a in host.audits] == [("file_failed", "empty.txt")] * 2
    assert fake.uploads == [] and fake.sent == []
    assert any("the notice of files not sent failed too" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if "handling a message" in r.getMessage()]  # no handler crash


async def test_an_album_still_collecting_when_the_channel_stops_is_answered_before_it_closes(
    fake: FakeTelegram,
) -> None:
    host = MediaHost()
    async with running(fake, host) as channel:
        album_clock(channel)  # its time never moves: only the stop can end the wait
        fake.send_file("photo", png(shade=3), user_id=ALICE, caption="last one", media_group_id="S1")
        await wait_until(lambda: channel.intake.albums.held == 1, "the part")
    [event] = host.events
    assert event.text == "last one" and len(fake.sent) == 1


async def test_in_webhook_mode_too_an_album_still_collecting_at_stop_is_answered(fake: FakeTelegram) -> None:
    # without an updater to stop first, the drain starts at once: the album's own task is drained
    api = Starlette()
    host = MediaHost()
    async with serving_webhook(fake, api, host) as channel:
        album_clock(channel)
        part = fake.file_update("photo", png(shade=9), user_id=ALICE, caption="in time", media_group_id="W1")
        assert (await fake.deliver_webhook(part)).status_code == 200
        await wait_until(lambda: channel.intake.albums.held == 1, "the part")
    [event] = host.events
    assert event.text == "in time" and len(fake.sent) == 1
