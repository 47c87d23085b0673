"""Files from tools (issue 21/22): an MCP server's images and audio (testkit/fake_mcp_media.py, the SDK's
own server over stdio) reach a model that takes them in its provider's shape (the fake OpenAI and
Anthropic servers check the parts as the real APIs do), a text-only model reads their stand-in; they
are stored like a person's files (and erased with them), replayed only within media.images_in_context
turns, and refused by media: limits in the result's text."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentd.config.models import DaemonSpec
from agentd.engine.agent import Agent
from agentd.events import InboundEvent, Reply
from agentd.store.queries import AuditEvents, MediaBlobs
from testkit.fake_llm import FakeLLM
from testkit.fake_mcp_media import media_command, picture_bytes, sound_bytes
from testkit.fake_media import audio_in, images_in
from tests.support import Harness

KEY = "webhook:t1"
RED = picture_bytes()
RED_SHA = hashlib.sha256(RED).hexdigest()


async def agent(harness: Harness, fake: FakeLLM, model: str, media: dict[str, Any] | None = None) -> Agent:
    providers = {
        "gpt": {"kind": "openai", "base_url": fake.openai_base_url, "api_key": "k", "max_retries": 0},
        "claude": {
            "kind": "anthropic",
            "base_url": fake.anthropic_base_url,
            "api_key": "k",
            "max_retries": 0,
        },
    }
    tools = {"mcp": {"media": {"command": media_command()}}}
    text = (
        f"model: {model}\nmemory: {{scope: thread}}\nchannels: {{webhook: {{}}}}\n"
        f"tools: {json.dumps(tools)}\nmedia: {json.dumps(media or {})}\n"
    )
    a = await harness.agent(text, settings=DaemonSpec.model_validate({"providers": providers}))
    await a.state.tool_servers.wait_ready(20)
    return a


async def send(a: Agent, text: str, user: str = "ana", key: str = KEY) -> Reply:
    return await a.handle(InboundEvent(a.name, key, text, "webhook", user_id=user))


def chats(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r.json for r in fake.requests if r.path in ("/v1/chat/completions", "/v1/messages")]


async def media_events(a: Agent) -> list[dict[str, Any]]:
    rows = await a.state.store.read(AuditEvents(a.name, "media", None, 100, None))
    return [{"action": r["action"], **r["data"]} for r in rows]


async def test_an_mcp_image_reaches_an_openai_vision_model_after_the_tool_message(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("A red square.")
    reply = await send(a, "draw me something")
    assert reply.text == "A red square."
    body = chats(fake)[1]
    tool, after = body["messages"][-2:]
    assert tool["role"] == "tool" and "[image (image/png" in tool["content"]
    assert after["role"] == "user" and after["content"][0]["text"].startswith(
        "The files media__picture returned"
    )
    assert images_in(body) == [RED]  # the very bytes the server made
    assert await a.state.store.read(MediaBlobs(KEY, [RED_SHA])) == {RED_SHA: RED}
    [stored] = await media_events(a)
    assert stored["action"] == "stored" and stored["source"] == "tool" and stored["tool"] == "media__picture"
    assert stored["user_id"] == "ana" and stored["sha256"] == RED_SHA


async def test_an_mcp_image_reaches_an_anthropic_model_inside_the_tool_result(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "claude/claude-3-5-sonnet-latest")
    fake.reply(tool_calls=[("media__picture", {"color": "blue"})])
    fake.reply("Blue.")
    await send(a, "draw")
    body = chats(fake)[1]
    [result] = [
        b
        for m in body["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    ]
    assert [b["type"] for b in result["content"]] == ["image"]
    assert images_in(body) == [picture_bytes(color="blue")]


async def test_an_embedded_image_resource_is_a_file_too(harness: Harness, fake: FakeLLM) -> None:
    a = await agent(harness, fake, "claude/claude-3-5-sonnet-latest")
    fake.reply(tool_calls=[("media__chart", {})])
    fake.reply("A chart.")
    await send(a, "chart")
    [result] = [b for m in chats(fake)[1]["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [b["type"] for b in result["content"]] == ["text", "image"]
    assert result["content"][0]["text"] == "the chart:"
    assert images_in(chats(fake)[1]) == [picture_bytes(4, "blue")]


async def test_a_text_only_model_reads_the_stand_in_and_the_image_models_description(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-test")
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("I cannot see it.")
    await send(a, "draw")
    tool = chats(fake)[1]["messages"][-1]
    assert tool["role"] == "tool" and "[image (image/png, " in tool["content"]
    assert "cannot look at images" in tool["content"] and images_in(chats(fake)[1]) == []

    fake.clear()
    described = await agent(harness, fake, "gpt/gpt-test", {"image_model": "gpt/gpt-4o"})
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("a small red square")  # the image model's description
    fake.reply("It is red.")
    await send(described, "draw", key="webhook:t2")
    describe, answer = chats(fake)[1:3]
    assert images_in(describe) == [RED]
    assert "description: a small red square" in answer["messages"][-1]["content"]
    assert images_in(answer) == []


async def test_an_mcp_sound_reaches_a_model_that_takes_audio_as_input_audio(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o-audio-preview")
    fake.reply(tool_calls=[("media__sound", {})])
    fake.reply("A tone.")
    await send(a, "play")
    assert audio_in(chats(fake)[1]) == [(sound_bytes(), "wav")]

    fake.clear()
    vision = await agent(harness, fake, "gpt/gpt-4o")  # sees, but does not hear: the stand-in
    fake.reply(tool_calls=[("media__sound", {})])
    fake.reply("A file.")
    await send(vision, "play", key="webhook:t2")
    assert audio_in(chats(fake)[1]) == [] and "[audio (audio/wav" in chats(fake)[1]["messages"][-1]["content"]


async def test_a_tool_image_is_shown_only_within_images_in_context_turns(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", {"images_in_context": 1})
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("Red.")
    await send(a, "draw")
    fake.reply(tool_calls=[("media__picture", {"color": "green"})])
    fake.reply("Green.")
    fake.reply("Later.")
    await send(a, "again")
    second_turn = chats(fake)[3]
    assert images_in(second_turn) == [picture_bytes(color="green")]  # this turn's only
    old_result = next(m for m in second_turn["messages"] if m["role"] == "tool")
    assert "[image (image/png" in old_result["content"]
    assert "shown in the next message" not in old_result["content"]  # the last turn's: by stand-in
    await send(a, "and now?")
    assert images_in(chats(fake)[4]) == []  # the turn of the tool calls is past images_in_context


async def test_a_tool_image_over_media_max_bytes_is_refused_in_the_result_text(
    harness: Harness, fake: FakeLLM
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o", {"max_bytes": 2000})
    fake.reply(tool_calls=[("media__picture", {"side": 64, "noisy": True})])
    fake.reply("Too big.")
    reply = await send(a, "draw big")
    assert reply.text == "Too big." and reply.files == ()
    tool = chats(fake)[1]["messages"][-1]
    assert tool["role"] == "tool"
    assert "was not taken: it is larger than media.max_bytes (2.0 KB)]" in tool["content"]
    assert images_in(chats(fake)[1]) == []
    [refused] = await media_events(a)
    assert refused["action"] == "refused" and refused["source"] == "tool"


@pytest.mark.both_stores
async def test_a_tool_image_is_exported_and_erased_with_the_person_it_served(
    harness: Harness, fake: FakeLLM, store_backend: str
) -> None:
    a = await agent(harness, fake, "gpt/gpt-4o")
    fake.reply(tool_calls=[("media__picture", {})])
    fake.reply("Red.")
    await send(a, "draw", user="ana")
    exported = await a.person_data("ana")
    assert exported is not None and [m["sha256"] for m in exported["media"]] == [RED_SHA]
    counts = await a.erase_person("ana", {"scrypt": "x"}, "operator")
    assert counts["media"] == 1
    assert await a.state.store.read(MediaBlobs(KEY, [RED_SHA])) == {}


async def test_an_image_shown_counts_in_the_estimate_and_compacts_before_the_call(
    harness: Harness, fake: FakeLLM
) -> None:
    """A 1024x1024 image counts ~1400 tokens (agentd.providers.images.image_tokens), not its stand-in's
    few characters: with it the prompt passes the window, and the thread is compacted before the call."""
    a = await agent(harness, fake, "{name: claude/claude-3-5-sonnet-latest, context_window: 1800}")
    for i in range(2):  # ~250 tokens a turn: far within the window without the image
        fake.reply("ok")
        await send(a, f"turn {i} " + "word " * 200)
    fake.reply(tool_calls=[("media__picture", {"side": 1024})])
    fake.reply("SUMMARY")  # the compaction, before the chat call that would show the image
    fake.reply("A big red square.")
    assert (await send(a, "draw a big one")).text == "A big red square."
    rows = await a.state.store.read(AuditEvents(a.name, "model", None, 10, None))
    [overflow] = [r["data"] for r in rows if r["action"] == "overflow"]
    assert overflow["trigger"] == "window" and overflow["estimated_tokens"] > 1800
    assert overflow["compaction"] == "ok"
    last = chats(fake)[-1]
    assert images_in(last) == [picture_bytes(1024)] and "SUMMARY" in json.dumps(last["system"])
