"""Images, files and voice (issue 21): what a person sends reaches the model in its provider's shape,
or is said to them; it is stored by hash, replayed only for the last turns, and erased with them.

Each test runs a real agent on a real store against the fake OpenAI/Anthropic server, which checks
the image parts and transcription forms it receives as the real APIs do, and asserts what was stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agentd.config.models import DaemonSpec
from agentd.engine.agent import Agent
from agentd.events import Attachment, InboundEvent, MediaTooLarge, Reply
from agentd.messages import MediaPart, Message
from agentd.store.queries import ActiveThread, MediaBlobs
from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.media_files import noisy_jpeg, ogg_voice, pdf, png
from tests.support import Harness, every_episode

KEY = "webhook:m1"
RED, BLUE = (220, 20, 20), (20, 20, 220)


def settings(fake: FakeLLM) -> DaemonSpec:
    return DaemonSpec.model_validate(
        {
            "providers": {
                "gpt": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0},
                "claude": {
                    "kind": "anthropic",
                    "base_url": fake.anthropic_base_url,
                    "api_key": "k",
                    "max_retries": 0,
                },
            }
        }
    )


async def agent(harness: Harness, fake: FakeLLM, model: str, media: str = "{}") -> Agent:
    text = f"model: {model}\nmemory: {{scope: thread}}\nchannels: {{webhook: {{}}}}\nmedia: {media}\n"
    return await harness.agent(text, settings=settings(fake))


async def send(a: Agent, text: str, *files: Attachment, user: str = "ana", key: str = KEY) -> Reply:
    return await a.handle(InboundEvent(a.name, key, text, "webhook", user_id=user, attachments=files))


def photo(data: bytes, name: str = "photo.png", mime: str | None = "image/png") -> Attachment:
    return Attachment("image", mime, name, len(data), data)


def chats(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r.json for r in fake.requests if r.path in ("/v1/chat/completions", "/v1/messages")]


def colour_of(data: bytes) -> tuple[int, ...]:
    with Image.open(io.BytesIO(data)) as image:
        return tuple(image.convert("RGB").getpixel((0, 0)))  # type: ignore[arg-type]


def near(colour: tuple[int, ...], wanted: tuple[int, int, int]) -> bool:
    return all(abs(a - b) < 30 for a, b in zip(colour, wanted, strict=True))


async def stored_user_messages(a: Agent, key: str = KEY) -> list[Message]:
    thread = await a.state.store.read(ActiveThread(key))
    return [m.message for m in thread.messages if m.message.role == "user"]


async def test_a_photo_reaches_an_openai_vision_model_as_an_image_url_part_scaled_to_its_limit(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    big = png(RED, (3000, 1200))
    reply = await send(a, "what colour is this?", photo(big))
    assert reply.error is None and reply.text.startswith("fake reply to:")
    [request] = chats(fake)
    user = request["messages"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url"]
    assert user["content"][1]["image_url"]["url"].startswith("data:image/")
    [sent] = images_in(request)
    with Image.open(io.BytesIO(sent)) as image:
        assert max(image.size) == 2048  # OpenAI's high-detail box
    assert near(colour_of(sent), RED)
    # stored: the message refers to the photo by hash; the bytes are in the store as sent
    [message] = await stored_user_messages(a)
    [part] = message.media
    assert part.sha256 == hashlib.sha256(big).hexdigest() and part.media == "image" and part.size == len(big)
    assert await a.state.store.read(MediaBlobs(KEY, [part.sha256])) == {part.sha256: big}
    [event] = [e for e in await a.audit_events(kind="media") if e["action"] == "stored"]
    assert event["data"]["sha256"] == part.sha256 and event["data"]["user_id"] == "ana"


async def test_a_photo_reaches_an_anthropic_model_as_an_image_block(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "claude/claude-sonnet-4-5")
    reply = await send(a, "", photo(png(BLUE, (2400, 1800))))
    assert reply.error is None
    [request] = chats(fake)
    [block] = request["messages"][-1]["content"]
    assert block["type"] == "image" and block["source"]["type"] == "base64"
    assert block["source"]["media_type"] in ("image/png", "image/jpeg")
    [sent] = images_in(request)
    with Image.open(io.BytesIO(sent)) as image:
        assert max(image.size) == 1568  # Anthropic's long edge


async def test_a_text_only_model_gets_the_image_models_description_marked_as_one(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-3.5-turbo", "{image_model: gpt/gpt-4o-mini}")
    fake.reply("A receipt from Cafe Uno dated Tuesday 3 March, total 12.50 EUR.")
    fake.reply("That receipt totals 12.50 EUR.")
    reply = await send(a, "how much was it?", photo(png(RED), "receipt.png"))
    assert reply.text == "That receipt totals 12.50 EUR."
    describe, chat = chats(fake)
    assert describe["model"] == "gpt-4o-mini" and len(images_in(describe)) == 1
    assert images_in(chat) == [] and chat["model"] == "gpt-3.5-turbo"
    said = chat["messages"][-1]["content"]
    assert isinstance(said, str)
    assert "description: A receipt from Cafe Uno dated Tuesday 3 March, total 12.50 EUR." in said
    [message] = await stored_user_messages(a)
    assert message.media[0].text_is == "description"
    # memory keeps it: what an episode is made of reads the description
    assert "Cafe Uno" in message.readable


async def test_without_an_image_model_the_person_is_told_the_agent_cannot_look_at_images(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-3.5-turbo")
    reply = await send(a, "what is this?", photo(png(RED), "cat.png"))
    assert reply.error is None
    assert reply.text.startswith("(This agent cannot look at images") and "cat.png" in reply.text
    [chat] = chats(fake)
    assert images_in(chat) == []
    assert "cannot look at images" in chat["messages"][-1]["content"]  # the model knows it too
    [message] = await stored_user_messages(a)
    assert message.media[0].note is not None and message.media[0].sha256  # kept, not dropped


async def test_an_oversized_file_is_refused_naming_the_limit_and_the_rest_is_answered(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{max_bytes: 10000}")
    small, big = png(RED), noisy_jpeg((400, 400))
    assert len(small) < 10000 < len(big)
    reply = await send(a, "two photos", photo(big, "big.jpg", "image/jpeg"), photo(small, "small.png"))
    assert reply.text.startswith("(big.jpg was not taken: it is larger than media.max_bytes (9.8 KB).)")
    [chat] = chats(fake)
    said = chat["messages"][-1]["content"]
    assert said[0] == {"type": "text", "text": "two photos"}  # the rest is still answered
    assert said[1]["text"].startswith("[image big.jpg (image/jpeg, ") and "not taken" in said[1]["text"]
    assert "\nfake reply to: " in reply.text
    assert len(images_in(chat)) == 1 and near(colour_of(images_in(chat)[0]), RED)
    [message] = await stored_user_messages(a)
    refused, taken = message.media
    assert refused.sha256 == "" and "media.max_bytes" in (refused.note or "")
    assert await a.state.store.read(MediaBlobs(KEY, [hashlib.sha256(big).hexdigest()])) == {}
    assert (await a.state.store.read(MediaBlobs(KEY, [taken.sha256])))[taken.sha256] == small
    actions = [e["action"] for e in await a.audit_events(kind="media")]
    assert sorted(actions) == ["refused", "stored"]


async def test_a_download_past_the_limit_is_stopped_by_the_channel_and_refused(
    harness: Harness, fake: FakeLLM
) -> None:
    asked: list[int] = []

    async def download(limit: int) -> bytes:
        asked.append(limit)
        raise MediaTooLarge(limit)

    a = await agent(harness, fake, "gpt/gpt-4o", "{max_bytes: 5000}")
    reply = await send(a, "here", Attachment("image", "image/jpeg", "x.jpg", None, None, download))
    assert asked == [5000] and "media.max_bytes" in reply.text and "fake reply to: here" in reply.text


async def test_a_voice_note_is_transcribed_and_echoed(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{transcribe: gpt/whisper-1, echo_transcript: true}")
    fake.transcript("remind me to buy milk tomorrow")
    voice = ogg_voice()
    reply = await send(a, "", Attachment("audio", "audio/ogg", None, len(voice), voice))
    assert reply.text.startswith("heard: remind me to buy milk tomorrow\nfake reply to:")
    [form] = [r.json for r in fake.requests if r.path == "/v1/audio/transcriptions"]
    assert form["model"] == "whisper-1" and form["file"] == {"filename": "voice.ogg", "size": len(voice)}
    [chat] = chats(fake)
    said = chat["messages"][-1]["content"]
    assert "transcript: remind me to buy milk tomorrow" in said
    assert json.dumps(chat).count("remind me to buy milk tomorrow") == 1  # the model reads it once
    [message] = await stored_user_messages(a)
    assert [p.kind for p in message.parts] == ["media"] and message.media[0].text_is == "transcript"
    assert str(message.model_dump()).count("remind me to buy milk tomorrow") == 1  # stored once
    # the next turn replays it once too, and the person saw "heard:" once
    await send(a, "and?")
    assert json.dumps(chats(fake)[-1]).count("remind me to buy milk tomorrow") == 2  # (+ the fake's echo)
    assert reply.text.count("heard: ") == 1


async def test_a_failed_transcription_is_said_and_the_audio_kept(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{transcribe: gpt/whisper-1}")
    fake.fail(500, endpoint="transcriptions", message="the server had an error")
    voice = ogg_voice()
    reply = await send(a, "", Attachment("audio", "audio/ogg", "note.ogg", len(voice), voice))
    assert reply.text.startswith("(I could not transcribe note.ogg (") and "It is kept" in reply.text
    [message] = await stored_user_messages(a)
    part = message.media[0]
    assert part.text is None and (part.note or "").startswith("transcription failed")
    assert (await a.state.store.read(MediaBlobs(KEY, [part.sha256])))[part.sha256] == voice


async def test_a_pdf_is_inlined_page_by_page(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini")
    document = pdf("Invoice 7: total 42 EUR", "Paid by card")
    await send(
        a, "summarise", Attachment("document", "application/pdf", "invoice.pdf", len(document), document)
    )
    [chat] = chats(fake)
    said = chat["messages"][-1]["content"]
    assert "a PDF of 2 page(s)" in said and "--- page 1 ---\nInvoice 7: total 42 EUR" in said
    assert "--- page 2 ---\nPaid by card" in said


async def test_a_text_file_is_cut_at_max_inline_chars_and_a_binary_one_named(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-mini", "{max_inline_chars: 10}")
    notes, blob = b"0123456789abcdef", bytes(range(256))
    await send(
        a,
        "look",
        Attachment("document", "text/plain", "notes.txt", len(notes), notes),
        Attachment("file", "application/octet-stream", "dump.bin", len(blob), blob),
    )
    said = chats(fake)[0]["messages"][-1]["content"]
    assert "content: 0123456789\n… (cut at media.max_inline_chars: 16 characters in all)" in said
    assert "[file dump.bin (application/octet-stream, 256 bytes)]" in said


async def test_the_second_of_two_photos_is_the_one_the_model_sees(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{images_in_context: 1}")
    await send(a, "first", photo(png(RED), "a.png"))
    await send(a, "and now?", photo(png(BLUE), "b.png"))
    second = chats(fake)[1]
    [seen] = images_in(second)
    assert near(colour_of(seen), BLUE)
    # the first photo is still in the transcript, read as a reference
    first = next(m for m in second["messages"] if m["role"] == "user")
    assert first["content"].startswith("first\n[image a.png (image/png, ")


async def test_images_are_replayed_only_for_the_last_turns_and_sent_once(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")  # images_in_context: 2
    colours = [(200, 0, 0), (0, 200, 0), (0, 0, 200)]
    for n, colour in enumerate(colours):
        await send(a, f"photo {n}", photo(png(colour), f"p{n}.png"))
    third = chats(fake)[2]
    assert [near(colour_of(i), c) for i, c in zip(images_in(third), colours[1:][::-1], strict=False)]
    sent = [colour_of(i) for i in images_in(third)]
    assert len(sent) == 2 and near(sent[0], colours[1]) and near(sent[1], colours[2])
    await send(a, "which was green?")
    fourth = chats(fake)[3]
    assert [near(colour_of(i), colours[2]) for i in images_in(fourth)] == [True]
    # the same photo twice in one message: one image, then a reference to it
    same = png((90, 90, 90))
    await send(a, "twice", photo(same, "x.png"), photo(same, "y.png"))
    fifth = chats(fake)[4]
    last = fifth["messages"][-1]["content"]
    assert [p["type"] for p in last] == ["text", "image_url", "text"]
    assert last[2]["text"] == "[the same image as above (y.png)]"


@pytest.mark.both_stores
async def test_media_is_listed_in_the_export_and_erased_with_the_person(
    harness: Harness, fake: FakeLLM, store_backend: str
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    image = noisy_jpeg((120, 90))
    await send(a, "mine", photo(image, "me.jpg", "image/jpeg"), key="webhook:ana")
    await send(a, "group photo", photo(image, "me.jpg", "image/jpeg"), key="webhook:group")
    await send(a, "bob's", photo(png(BLUE), "bob.png"), user="bob", key="webhook:group")
    sha = hashlib.sha256(image).hexdigest()
    exported = await a.person_data("ana")
    assert exported is not None
    assert sorted((m["conversation_key"], m["sha256"]) for m in exported["media"]) == [
        ("webhook:ana", sha),
        ("webhook:group", sha),
    ]
    counts = await a.erase_person("ana", {"scrypt": "x"}, "operator")
    assert counts["media"] == 2
    store = a.state.store
    assert await store.read(MediaBlobs("webhook:ana", [sha])) == {}
    assert await store.read(MediaBlobs("webhook:group", [sha])) == {}
    bob_sha = hashlib.sha256(png(BLUE)).hexdigest()
    assert bob_sha in await store.read(MediaBlobs("webhook:group", [bob_sha]))  # bob's photo stays
    after = await a.person_data("ana")
    assert after is not None and after["media"] == []
    if store_backend == "sqlite":  # no byte left in the file (secure_delete, the WAL checkpointed)
        await a.drain(5)
        raw = harness.file_of(a).read_bytes()
        wal = harness.file_of(a).with_name(harness.file_of(a).name + "-wal")
        raw += wal.read_bytes() if wal.exists() else b""
        assert image[200:264] not in raw


async def test_media_past_keep_days_is_pruned_and_audited(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{keep_days: 7}")
    await send(a, "old", photo(png(RED)))
    [message] = await stored_user_messages(a)
    sha = message.media[0].sha256
    import time

    assert await a.prune_media(time.time()) == 0
    assert await a.prune_media(time.time() + 8 * 86400) == 1
    assert await a.state.store.read(MediaBlobs(KEY, [sha])) == {}
    [event] = [e for e in await a.audit_events(kind="media") if e["action"] == "prune"]
    assert event["data"] == {"files": 1, "keep_days": 7}
    # the transcript keeps its reference: a later turn reads it by its stand-in, never fails
    reply = await send(a, "still there?")
    assert reply.error is None and images_in(chats(fake)[-1]) == []


def test_media_part_round_trips_through_the_message_codec() -> None:
    from agentd.messages import dump_message, load_message

    part = MediaPart(sha256="ab" * 32, media="image", mime_type="image/png", size=10, filename="a.png")
    message = Message(role="user", parts=(part,), user_id="ana")
    assert load_message(dump_message(message)) == message


@pytest.mark.both_stores
async def test_deleting_a_conversation_deletes_its_files(
    harness: Harness, fake: FakeLLM, store_backend: str
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    await send(a, "mine", photo(png(RED)))
    [message] = await stored_user_messages(a)
    sha = message.media[0].sha256
    assert await a.delete_conversation(KEY, by="operator") == {"threads": 1, "messages": 2}
    assert await a.state.store.read(MediaBlobs(KEY, [sha])) == {}
    [event] = await a.audit_events(kind="conversation")
    assert event["data"] == {"threads": 1, "messages": 2, "media": 1, "by": "operator"}


async def test_the_receipt_sent_on_tuesday_is_recalled_by_what_was_on_it(
    harness: Harness, fake: FakeLLM
) -> None:
    spec = "model: gpt/gpt-3.5-turbo\nmemory: {scope: thread, strategy: {kind: episodic, top_k: 3}}\n"
    spec += "channels: {webhook: {}}\nmedia: {image_model: gpt/gpt-4o-mini}\n"
    a = await harness.agent(spec, settings=settings(fake))
    fake.reply("A receipt from Cafe Uno, Tuesday 3 March: two espressos, total 12.50 EUR.")
    fake.reply("Noted.")
    await send(a, "keep this for my expenses", photo(png(RED), "receipt.png"))
    await a.drain(5)  # the episode is written after the run
    [episode] = [e for e in await every_episode(a) if "Cafe Uno" in e.text]
    assert "description: A receipt from Cafe Uno" in episode.text
    # a new conversation, days later: the question recalls it by what was on it
    await send(a, "how much was the Cafe Uno receipt?", key="webhook:later")
    system = chats(fake)[-1]["messages"][0]
    assert system["role"] == "system" and "12.50 EUR" in system["content"]


async def test_an_ollama_vision_model_gets_the_photo_through_its_openai_compatible_endpoint(
    harness: Harness, fake: FakeLLM
) -> None:
    local = {"kind": "ollama", "base_url": fake.openai_base_url, "max_retries": 0}
    spec = "model: local/llava:7b\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
    a = await harness.agent(spec, settings=DaemonSpec.model_validate({"providers": {"local": local}}))
    await send(a, "what is it?", photo(png(BLUE, (3000, 100))))
    [chat] = chats(fake)
    assert chat["model"] == "llava:7b" and len(images_in(chat)) == 1  # base64 image_url parts (Ollama's /v1)


async def test_a_kind_or_type_not_allowed_is_refused_naming_the_setting(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{allowed: [image], allowed_types: ['image/png']}")
    document = pdf("secret plans")
    reply = await send(
        a,
        "files",
        Attachment("document", "application/pdf", "plans.pdf", len(document), document),
        photo(noisy_jpeg((32, 32)), "x.jpg", "image/jpeg"),
        photo(png(RED), "ok.png"),
    )
    assert (
        "(plans.pdf was not taken: this agent takes no document files (media.allowed: image).)" in reply.text
    )
    assert "(x.jpg was not taken: image/jpeg is not taken (media.allowed_types: image/png).)" in reply.text
    [chat] = chats(fake)
    assert len(images_in(chat)) == 1 and "secret plans" not in str(chat)


async def test_compaction_summarises_around_the_images_and_the_last_turns_keep_theirs(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    for n in range(4):
        await send(a, f"photo {n}", photo(png((60 * n, 100, 100)), f"p{n}.png"))
    fake.reply("Summary: the person sent four photos, p0 to p3.")
    await send(a, "/compact")
    summary_request = chats(fake)[-1]
    assert images_in(summary_request) == []  # the summary reads the photos' stand-ins, never the bytes
    assert "[image p0.png (image/png, " in json.dumps(summary_request)
    await send(a, "which photos?")
    after = chats(fake)[-1]
    assert "Summary: the person sent four photos" in json.dumps(after)
    # the last turns kept verbatim still show their image (the newest of them), older ones are summarised
    assert len(images_in(after)) == 1 and near(colour_of(images_in(after)[0]), (180, 100, 100))


async def test_store_copy_brings_the_files_to_postgresql(
    tmp_path: Path, fake: FakeLLM, postgres_url: str
) -> None:
    from agentd.cli import main

    spec = "model: gpt/gpt-4o\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
    on_files = Harness(tmp_path / "data")
    a = await on_files.agent(spec, name="eyes", settings=settings(fake))
    image = noisy_jpeg((64, 64))
    await send(a, "keep", photo(image, "k.jpg", "image/jpeg"))
    await on_files.close()
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "eyes.yaml").write_text(spec)
    gpt = {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k"}
    (tmp_path / "agentd.yaml").write_text(json.dumps({"providers": {"gpt": gpt}}))
    argv = [
        "store",
        "copy",
        "--to",
        postgres_url,
        "--agents",
        str(tmp_path / "agents"),
        "--data",
        str(tmp_path / "data"),
    ]
    assert await asyncio.to_thread(main, argv) == 0
    on_postgres = Harness(tmp_path / "unused", store_url=postgres_url)
    try:
        b = await on_postgres.agent(spec, name="eyes", settings=settings(fake))
        sha = hashlib.sha256(image).hexdigest()
        assert await b.state.store.read(MediaBlobs(KEY, [sha])) == {sha: image}
    finally:
        await on_postgres.close()


async def test_files_sent_with_a_command_are_said_not_taken(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    reply = await send(a, "/help", photo(png(RED)))
    assert reply.text.endswith(
        "\n(The files were not taken: a command takes none; send them with a message.)"
    )
    assert chats(fake) == []


async def test_a_vision_model_sees_the_photo_and_older_turns_read_its_description(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{image_model: gpt/gpt-4o-mini, images_in_context: 1}")
    fake.reply("A red square.")
    await send(a, "look", photo(png(RED), "red.png"))
    describe, chat = chats(fake)
    assert describe["model"] == "gpt-4o-mini" and len(images_in(chat)) == 1  # the chat model sees it
    await send(a, "and now?")
    later = chats(fake)[-1]
    assert images_in(later) == []  # past images_in_context: by its description
    first = next(m for m in later["messages"] if m["role"] == "user")
    assert (
        "[image red.png (image/png, " in first["content"] and "description: A red square." in first["content"]
    )


async def test_the_message_limit_refuses_the_file_that_goes_past_it(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", "{max_bytes: 10000, max_message_bytes: 12000}")
    one, two = b"a" * 8000, b"b" * 8000
    reply = await send(
        a,
        "two files",
        Attachment("document", "text/plain", "one.txt", len(one), one),
        Attachment("document", "text/plain", "two.txt", len(two), two),
    )
    assert reply.text.startswith(
        "(two.txt was not taken: the message's files are larger than media.max_message_bytes (11.7 KB).)"
    )
    [message] = await stored_user_messages(a)
    assert [p.sha256 != "" for p in message.media] == [True, False]


async def test_an_image_that_cannot_be_read_is_kept_as_a_file_and_said(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    broken = b"\xff\xd8\xff\xe0" + b"not a jpeg" * 50
    reply = await send(a, "see?", photo(broken, "broken.jpg", "image/jpeg"))
    assert reply.error is None
    assert reply.text.startswith(
        "(broken.jpg is an image agentd cannot read (image/jpeg): it is kept as a file.)"
    )
    [chat] = chats(fake)
    assert images_in(chat) == [] and "[file broken.jpg (image/jpeg, " in chat["messages"][-1]["content"]


async def test_without_a_transcript_kept_a_failed_voice_note_is_not_said_to_be_kept(
    harness: Harness, fake: FakeLLM
) -> None:
    spec = (
        "model: gpt/gpt-4o-mini\nchannels: {webhook: {}}\nmedia: {transcribe: gpt/whisper-1}\n"  # scope: none
    )
    a = await harness.agent(spec, settings=settings(fake))
    fake.fail(500, endpoint="transcriptions")
    voice = ogg_voice()
    reply = await send(a, "", Attachment("audio", "audio/ogg", "n.ogg", len(voice), voice))
    assert "Please send it again or type it." in reply.text and "It is kept" not in reply.text
    [event] = await a.audit_events(kind="media")
    assert event["action"] == "taken"


@pytest.mark.parametrize(
    ("model", "sees"),
    [
        ("{name: gpt/gpt-4o, input: [text]}", False),
        ("{name: gpt/my-finetune, input: [text, image]}", True),
        ("gpt/my-finetune", False),
    ],
)
async def test_model_input_says_what_a_model_takes(
    harness: Harness, fake: FakeLLM, model: str, sees: bool
) -> None:
    a = await agent(harness, fake, model)
    reply = await send(a, "look", photo(png(RED)))
    assert len(images_in(chats(fake)[0])) == (1 if sees else 0)
    assert ("cannot look at images" in reply.text) is not sees
