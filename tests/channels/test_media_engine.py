"""Files from each chat platform through the real engine: the platform's fake (real client libraries
on the wire) -> the channel -> the daemon's AgentHost -> an agent on a real SQLite store -> the fake
OpenAI / Anthropic server, which checks the image parts and transcription forms as the real APIs do.
Each test asserts what the model received, what the person saw on the platform, and what was stored
(the first on PostgreSQL too)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import discord
import pytest
from PIL import Image

from agentd.channels.chat import ChatChannel
from agentd.channels.discord import DiscordChannel
from agentd.channels.slack import SlackChannel
from agentd.channels.telegram import TelegramChannel
from agentd.config.discord import DiscordSpec
from agentd.config.models import DaemonSpec
from agentd.config.slack import SlackSpec
from agentd.config.telegram import TelegramSpec
from agentd.daemon.host import AgentHost
from agentd.engine.agent import Agent
from agentd.store.queries import ActiveThread, MediaBlobs
from testkit.fake_discord import FakeDiscord, FakeFile
from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.fake_slack import FakeSlack
from testkit.fake_telegram import FakeTelegram
from testkit.media_files import ogg_voice, pdf
from testkit.waiting import wait_until
from tests.support import Harness

pytestmark = pytest.mark.filterwarnings(
    "ignore:Deprecated since version v22.2. In a future major version attribute .retry_after."
    ":telegram.warnings.PTBDeprecationWarning"
)
ALICE = 1111
RED, BLUE = (220, 20, 20), (20, 20, 220)


def photo_of(colour: tuple[int, int, int], fmt: str = "JPEG", size: tuple[int, int] = (320, 240)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, fmt)
    return buffer.getvalue()


def colour_of(data: bytes) -> tuple[int, ...]:
    with Image.open(io.BytesIO(data)) as image:
        return tuple(image.convert("RGB").getpixel((0, 0)))  # type: ignore[arg-type]


def near(colour: tuple[int, ...], wanted: tuple[int, int, int]) -> bool:
    return all(abs(a - b) < 30 for a, b in zip(colour, wanted, strict=True))


def chats(llm: FakeLLM) -> list[dict[str, Any]]:
    return [r.json for r in llm.requests if r.path in ("/v1/chat/completions", "/v1/messages")]


async def agent(harness: Harness, llm: FakeLLM, model: str, media: str = "{}") -> Agent:
    providers = {
        "gpt": {"kind": "openai", "base_url": llm.openai_base_url, "api_key": "k", "max_retries": 0},
        "claude": {"kind": "anthropic", "base_url": llm.anthropic_base_url, "api_key": "k", "max_retries": 0},
    }
    text = f"model: {model}\nmemory: {{scope: thread}}\nmedia: {media}\n"
    return await harness.agent(text, settings=DaemonSpec.model_validate({"providers": providers}))


@contextlib.asynccontextmanager
async def serving(channel: ChatChannel[Any, Any], a: Agent) -> AsyncIterator[AgentHost]:
    """The channel run as the daemon runs it: with the AgentHost of the agent."""
    host = AgentHost(SimpleNamespace(name=a.name, agent=a), asyncio.ensure_future)
    task = asyncio.create_task(channel.run(host))
    try:
        await wait_until(lambda: host.statuses.get(channel.name, ("",))[0] == "running" or task.done())
        assert not task.done(), task
        yield host
    finally:
        await channel.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)


async def stored_media(a: Agent, key: str) -> dict[str, bytes]:
    thread = await a.state.store.read(ActiveThread(key))
    hashes = [p.sha256 for m in thread.messages for p in m.message.media if p.sha256]
    return await a.state.store.read(MediaBlobs(key, hashes))


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def telegram_channel(fake: FakeTelegram) -> TelegramChannel:
    return TelegramChannel("bot", TelegramSpec(token=fake.token, api_base_url=fake.api_base_url))


@pytest.mark.both_stores
async def test_a_telegram_photo_reaches_an_openai_vision_model_as_an_image_url_part(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    red = photo_of(RED)
    async with serving(telegram_channel(telegram), a):
        telegram.send_file("photo", red, user_id=ALICE, caption="what colour is this?")
        [sent] = await telegram.wait_for_sent(1, timeout=10)

    assert sent["text"].startswith("fake reply to:")
    [request] = chats(fake)
    user = request["messages"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url"]
    assert user["content"][0]["text"] == "what colour is this?"
    [seen] = images_in(request)
    assert near(colour_of(seen), RED)
    assert await stored_media(a, f"telegram:{ALICE}") == {hashlib.sha256(red).hexdigest(): red}


async def test_a_telegram_file_over_media_max_bytes_is_refused_before_getfile_and_the_text_answered(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{max_bytes: 10000}")
    async with serving(telegram_channel(telegram), a):
        telegram.send_file(
            "document", bytes(50_000), user_id=ALICE, caption="see attached", filename="big.zip"
        )
        [sent] = await telegram.wait_for_sent(1, timeout=10)

    assert sent["text"].startswith("(big.zip was not taken: it is larger than media.max_bytes (9.8 KB).)")
    assert "fake reply to:" in sent["text"]  # the rest of the message is still answered
    assert telegram.calls_to("getFile") == [] and telegram.downloads == []


async def test_a_telegram_photo_to_a_text_only_model_is_said_to_the_person(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-3.5-turbo")
    async with serving(telegram_channel(telegram), a):
        telegram.send_file("photo", photo_of(RED), user_id=ALICE)
        [sent] = await telegram.wait_for_sent(1, timeout=10)
    assert sent["text"].startswith("(This agent cannot look at images")
    assert images_in(chats(fake)[0]) == []


async def test_a_slack_image_reaches_an_anthropic_model_as_an_image_block(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "claude/claude-sonnet-4-5")
    blue = photo_of(BLUE, "PNG")
    async with FakeSlack() as slack:
        spec = SlackSpec(bot_token=slack.bot_token, app_token=slack.app_token, api_base_url=slack.api_url)
        async with serving(SlackChannel(a.name, spec), a):
            await slack.wait_for_connections(1)
            item = slack.file_object(blue, "chart.png", "image/png")
            await slack.push_event(slack.file_message_event("", [item], channel="D0ALICE", channel_type="im"))
            [post] = await slack.wait_for_posts(1, timeout=10)

    assert post["text"].startswith("fake reply to:")
    [request] = chats(fake)
    [block] = request["messages"][-1]["content"]
    assert block["type"] == "image" and block["source"]["type"] == "base64"
    assert near(colour_of(images_in(request)[0]), BLUE)
    assert slack.downloads[0][1], "fetched with the bot token"
    assert await stored_media(a, "slack:D0ALICE") == {hashlib.sha256(blue).hexdigest(): blue}


@pytest.fixture
async def discord_fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # the channel points discord.py's class-level endpoints at the fake; put them back afterwards
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    gateway = discord.gateway.DiscordWebSocket
    monkeypatch.setattr(gateway, "DEFAULT_GATEWAY", gateway.DEFAULT_GATEWAY)
    server = FakeDiscord(heartbeat_ms=200)
    await server.start()
    yield server
    await server.stop()


def discord_channel(server: FakeDiscord, a: Agent) -> DiscordChannel:
    spec = DiscordSpec(token=server.token, api_base_url=server.api_base_url, gateway_url=server.gateway_url)
    return DiscordChannel(a.name, spec, guild_ready_timeout=0.05)


async def test_a_discord_voice_message_is_transcribed_and_the_transcript_echoed(
    harness: Harness, fake: FakeLLM, discord_fake: FakeDiscord
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{transcribe: gpt/whisper-1, echo_transcript: true}")
    fake.transcript("remind me to buy milk tomorrow")
    voice = ogg_voice()
    alice = discord_fake.add_user("alice")
    async with serving(discord_channel(discord_fake, a), a):
        note = FakeFile("voice-message.ogg", "audio/ogg", voice, duration_secs=2.0)
        await discord_fake.dm(alice, "", attachments=[note])
        [sent] = await discord_fake.wait_for_sent(1, timeout=10)

    assert sent.content.startswith("heard: remind me to buy milk tomorrow\n")
    [form] = [r.json for r in fake.requests if r.path == "/v1/audio/transcriptions"]
    assert form["model"] == "whisper-1" and form["file"]["size"] == len(voice)
    [chat] = chats(fake)
    assert "transcript: remind me to buy milk tomorrow" in chat["messages"][-1]["content"]
    assert await stored_media(a, f"discord:dm:{alice}") == {hashlib.sha256(voice).hexdigest(): voice}


async def test_the_second_of_two_telegram_photos_is_the_one_the_model_is_asked_about(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    async with serving(telegram_channel(telegram), a):
        telegram.send_file("photo", photo_of(RED), user_id=ALICE, caption="first")
        await telegram.wait_for_sent(1, timeout=10)
        telegram.send_file("photo", photo_of(BLUE), user_id=ALICE, caption="and this one?")
        await telegram.wait_for_sent(2, timeout=10)

    _, second = chats(fake)
    newest = second["messages"][-1]
    assert newest["content"][0]["text"] == "and this one?"
    [seen] = images_in({"messages": [newest]})  # one image in the new message: this one's
    assert near(colour_of(seen), BLUE)
    assert len(telegram.downloads) == 2  # each photo fetched once, when its own message came


async def test_a_telegram_voice_note_whose_transcription_fails_is_said_to_the_person(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{transcribe: gpt/whisper-1}")
    fake.fail(500, endpoint="transcriptions", message="the server had an error")
    voice = ogg_voice()
    async with serving(telegram_channel(telegram), a):
        telegram.send_file("voice", voice, user_id=ALICE, mime_type="audio/ogg")
        [sent] = await telegram.wait_for_sent(1, timeout=10)
    assert sent["text"].startswith("(I could not transcribe")
    assert await stored_media(a, f"telegram:{ALICE}") == {hashlib.sha256(voice).hexdigest(): voice}  # kept


async def test_a_redelivered_telegram_voice_note_is_transcribed_and_answered_once(
    harness: Harness, fake: FakeLLM, telegram: FakeTelegram
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{transcribe: gpt/whisper-1, echo_transcript: true}")
    fake.transcript("call the plumber")
    async with serving(telegram_channel(telegram), a):
        update = telegram.send_file("voice", ogg_voice(), user_id=ALICE, mime_type="audio/ogg")
        await telegram.wait_for_sent(1, timeout=10)
        telegram.redeliver(update)  # Telegram sends it again when our confirmation was lost
        telegram.send_text("and the electrician", user_id=ALICE)  # answered after the repeat, in order
        first, second = await telegram.wait_for_sent(2, timeout=10)

    assert first["text"].startswith("heard: call the plumber\n")
    assert "heard:" not in second["text"] and "and the electrician" in second["text"]
    assert len([r for r in fake.requests if r.path == "/v1/audio/transcriptions"]) == 1
    assert len(telegram.downloads) == 1  # not even fetched again


async def test_a_discord_attachment_over_media_max_bytes_is_refused_unfetched_and_the_rest_answered(
    harness: Harness, fake: FakeLLM, discord_fake: FakeDiscord
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{max_bytes: 10000}")
    alice = discord_fake.add_user("alice")
    small = photo_of(RED, size=(16, 16))
    async with serving(discord_channel(discord_fake, a), a):
        big = FakeFile("holiday.mov", "video/quicktime", bytes(50_000))
        await discord_fake.dm(alice, "two files", attachments=[big, FakeFile("red.jpg", "image/jpeg", small)])
        [sent] = await discord_fake.wait_for_sent(1, timeout=10)

    assert sent.content.startswith("(holiday.mov was not taken: it is larger than media.max_bytes (9.8 KB).)")
    assert [path.rpartition("/")[2] for path in discord_fake.downloads] == ["red.jpg"]  # the big one: never
    [seen] = images_in(chats(fake)[0])
    assert near(colour_of(seen), RED)


async def test_a_pdf_shared_on_slack_is_read_to_the_model_page_by_page(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini")
    invoice = pdf("Invoice 7: total 42 EUR", "Paid by card")
    async with FakeSlack() as slack:
        spec = SlackSpec(bot_token=slack.bot_token, app_token=slack.app_token, api_base_url=slack.api_url)
        async with serving(SlackChannel(a.name, spec), a):
            await slack.wait_for_connections(1)
            item = slack.file_object(invoice, "invoice.pdf", "application/pdf")
            await slack.push_event(
                slack.file_message_event("what do I owe?", [item], channel="D0ALICE", channel_type="im")
            )
            await slack.wait_for_posts(1, timeout=10)

    said = chats(fake)[0]["messages"][-1]["content"]
    assert "what do I owe?" in said and "a PDF of 2 page(s)" in said
    assert "--- page 1 ---\nInvoice 7: total 42 EUR" in said and "--- page 2 ---\nPaid by card" in said


async def test_a_slack_file_arriving_as_message_and_app_mention_at_once_is_fetched_and_answered_once(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    red = photo_of(RED, "PNG")
    async with FakeSlack() as slack:
        spec = SlackSpec(bot_token=slack.bot_token, app_token=slack.app_token, api_base_url=slack.api_url)
        async with serving(SlackChannel(a.name, spec), a):
            await slack.wait_for_connections(1)
            item = slack.file_object(red, "red.png", "image/png")
            message = slack.file_message_event(f"<@{slack.bot_user_id}> what colour?", [item])
            mention = {**slack.mention_event("what colour?", ts=message["ts"]), "files": [item]}
            await asyncio.gather(slack.push_event(message), slack.push_event(mention))
            await slack.wait_for_posts(1, timeout=10)
            await asyncio.sleep(0.3)

    assert len(slack.posts) == 1 and len(chats(fake)) == 1
    assert len(slack.downloads) == 1
