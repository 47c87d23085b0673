"""Files on Discord: real discord.py against the fake Discord (attachments at signed CDN URLs,
multipart uploads), with a host that takes files the way the engine does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import discord
import pytest

from agentd.channels.discord import DiscordChannel
from agentd.config.discord import DiscordSpec
from agentd.events import MediaTooLarge, OutgoingFile
from testkit.fake_discord import FakeDiscord, FakeFile
from testkit.waiting import wait_until
from tests.channels.media_support import OGG, PDF, MediaHost, png

FAST = {"guild_ready_timeout": 0.05, "send_retry_delays": (0.01,), "reconnect_backoff": (0.05, 0.2)}


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    server = FakeDiscord(heartbeat_ms=200)
    await server.start()
    yield server
    await server.stop()


@contextlib.asynccontextmanager
async def running(fake: FakeDiscord, host: MediaHost) -> AsyncIterator[DiscordChannel]:
    spec = DiscordSpec(token=fake.token, api_base_url=fake.api_base_url, gateway_url=fake.gateway_url)
    channel = DiscordChannel(host.agent, spec, **FAST)  # type: ignore[arg-type]
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(lambda: host.last_status("discord") == "running" or task.done(), "the channel")
        yield channel
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)


async def test_a_photo_alone_in_a_dm_reaches_the_host_with_its_bytes(fake: FakeDiscord) -> None:
    alice = fake.add_user("alice")
    photo = png(16, 9)
    host = MediaHost()
    async with running(fake, host):
        await fake.dm(alice, "", attachments=[FakeFile("IMG_0001.png", "image/png", photo)])
        await fake.wait_for_sent(1)

    [event] = host.events
    assert event.text == ""  # no text: still a message
    [image] = event.attachments
    assert (image.kind, image.mime_type, image.filename, image.size) == (
        "image",
        "image/png",
        "IMG_0001.png",
        len(photo),
    )
    assert host.fetched == [[photo]]
    assert len(fake.downloads) == 1  # the signed CDN URL, opened without the bot token


async def test_a_voice_message_is_audio_and_a_document_in_a_channel_comes_with_its_text(
    fake: FakeDiscord,
) -> None:
    guild = fake.add_guild()
    general = fake.add_text_channel(guild)
    alice = fake.add_user("alice")
    host = MediaHost()
    async with running(fake, host):
        await fake.dm(
            alice, "", attachments=[FakeFile("voice-message.ogg", "audio/ogg", OGG, duration_secs=2.5)]
        )
        pdf = FakeFile("invoice.pdf", "application/pdf", PDF)
        await fake.user_message(general, alice, "total?", mention_bot=True, attachments=[pdf])
        await fake.wait_for_sent(2)

    voice, invoice = host.events
    assert (voice.attachments[0].kind, voice.attachments[0].mime_type) == ("audio", "audio/ogg")
    assert invoice.text == "total?" and invoice.attachments[0].kind == "document"
    assert host.fetched == [[OGG], [PDF]]


async def test_an_attachment_declared_too_large_is_refused_without_a_download(fake: FakeDiscord) -> None:
    alice = fake.add_user("alice")
    host = MediaHost(max_bytes=1000)
    async with running(fake, host):
        await fake.dm(alice, "look", attachments=[FakeFile("big.zip", "application/zip", bytes(5000))])
        await fake.wait_for_sent(1)
    [[refused]] = host.fetched
    assert isinstance(refused, MediaTooLarge) and refused.limit == 1000
    assert fake.downloads == []


async def test_an_attachment_larger_than_declared_is_cut_off_at_the_limit(fake: FakeDiscord) -> None:
    alice = fake.add_user("alice")
    host = MediaHost(max_bytes=1000)
    async with running(fake, host):
        await fake.dm(alice, "", attachments=[FakeFile("a.txt", "text/plain", bytes(5000), declared_size=10)])
        await fake.wait_for_sent(1)
    [[refused]] = host.fetched
    assert isinstance(refused, MediaTooLarge)
    assert len(fake.downloads) == 1


async def test_a_reply_with_files_is_a_multipart_upload_after_the_text(fake: FakeDiscord) -> None:
    alice = fake.add_user("alice")
    chart = png(8, 8)
    files = [
        OutgoingFile("chart.png", "image/png", chart),
        OutgoingFile("report.pdf", "application/pdf", PDF),
    ]
    host = MediaHost(reply_files=files, reply_with=lambda e: "here")
    async with running(fake, host):
        await fake.dm(alice, "chart please")
        text, first, second = await fake.wait_for_sent(3)

    assert text.content == "here" and not text.files
    assert [(f.filename, f.data) for f in first.files + second.files] == [
        ("chart.png", chart),
        ("report.pdf", PDF),
    ]
    assert first.nonce != second.nonce != text.nonce  # each its own nonce: none is dropped as a repeat
    assert host.audits == []


async def test_an_upload_over_discords_limit_is_said_and_audited(fake: FakeDiscord) -> None:
    alice = fake.add_user("alice")
    fake.upload_limit = 1000
    files = [
        OutgoingFile("huge.bin", "application/octet-stream", bytes(2000)),
        OutgoingFile("ok.png", "image/png", png()),
    ]
    host = MediaHost(reply_files=files, reply_with=lambda e: "two files")
    async with running(fake, host):
        await fake.dm(alice, "files")
        await wait_until(lambda: len(fake.sent) == 3, "text, the good file, the notice")

    text, good, notice = fake.sent
    assert text.content == "two files"
    assert [f.filename for f in good.files] == ["ok.png"]
    assert notice.content == "(I could not send huge.bin: the upload failed.)"
    [audit] = host.audits
    assert (audit["kind"], audit["action"]) == ("channel", "file_failed")
    assert "413" in audit["data"]["error"] or "40005" in audit["data"]["error"]
