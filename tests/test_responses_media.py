"""The Responses API's images, files and audio (issue 21), and its 409 for a conversation held by a
pending approval (issue 22), driven by the official `openai` client against a daemon on loopback whose
model is the fake OpenAI server: each test checks what reached the model and what was stored."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agentd.daemon import Daemon
from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.media_files import pdf, png, wav_tone
from tests.support import daemon_on_loopback
from tests.test_media_http import RED, colour, files_server, stored_media
from tests.tools.support import agent_yaml, stdio_server
from tests.tools.test_approvals import script_write

__all__ = ["files_server"]  # the fixture, shared with the webhook's media tests
TOKEN = "s3cret"


def settings(fake: FakeLLM) -> str:
    return (
        f"providers: {{gpt: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM, files_server: str) -> AsyncIterator[tuple[Daemon, str]]:
    media = f"media: {{allowed_urls: ['{files_server}/'], max_bytes: 1000000, transcribe: gpt/whisper-1}}\n"
    eyes = "model: gpt/gpt-4o\nmemory: {scope: thread}\nchannels: {webhook: {}}\n" + media
    blind = "model: gpt/gpt-3.5-turbo\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
    async with daemon_on_loopback(tmp_path, {"eyes": eyes, "blind": blind}, settings(fake)) as running:
        yield running


def client_of(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def user(*parts: dict[str, Any]) -> list[Any]:
    return [{"role": "user", "content": [{"type": "input_text", "text": "look"}, *parts]}]


async def test_an_input_image_reaches_a_vision_model_and_a_text_only_one_is_told(
    served: tuple[Daemon, str], fake: FakeLLM, files_server: str
) -> None:
    daemon, url = served
    photo = png(RED, (120, 80))
    async with client_of(url) as client:
        image = {"type": "input_image", "image_url": data_url("image/png", photo), "detail": "auto"}
        answer = await client.responses.create(model="eyes", user="ana", input=user(image))
        assert answer.output_text.startswith("fake reply to:")
        [sent] = images_in(fake.requests[-1].json)
        assert colour(sent)[:3] == RED
        assert await stored_media(daemon, "openai:ana") == [hashlib.sha256(photo).hexdigest()]
        # an image by an allowed URL, and a voice note as input_audio, continuing the response
        fake.transcript("it is red")
        audio = {"data": base64.b64encode(wav_tone()).decode(), "format": "wav"}
        await client.responses.create(
            model="eyes",
            previous_response_id=answer.id,
            input=user(
                {"type": "input_image", "image_url": f"{files_server}/red.png", "detail": "low"},
                {"type": "input_audio", "input_audio": audio},
            ),
        )
        said = fake.requests[-1].json["messages"][-1]["content"]
        assert [p["type"] for p in said] == ["text", "image_url", "text"]
        assert said[0]["text"] == "look" and "transcript: it is red" in said[2]["text"]
        assert colour(images_in(fake.requests[-1].json)[-1])[:3] == RED
        # a text-only model without media.image_model: the person and the model are told
        told = await client.responses.create(model="blind", input=user(image))
        assert told.output_text.startswith("(This agent cannot look at images")
        assert "cannot look at images" in str(fake.requests[-1].json["messages"][-1]["content"])
        assert images_in(fake.requests[-1].json) == []


async def test_an_input_file_pdf_is_read_to_the_model_and_one_over_the_limit_is_refused(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    document = pdf("Invoice 7: total 42 EUR", "Paid by card")
    async with client_of(url) as client:
        for file_data in (data_url("application/pdf", document), base64.b64encode(document).decode()):
            part = {"type": "input_file", "filename": "invoice.pdf", "file_data": file_data}
            await client.responses.create(model="eyes", input=user(part))
            said = str(fake.requests[-1].json["messages"][-1]["content"])
            assert "a PDF of 2 page(s)" in said and "Invoice 7: total 42 EUR" in said, said
        calls = len(fake.requests)
        big = pdf("x" * 1_100_000)  # past media.max_bytes (1,000,000), within the body's limit
        part = {"type": "input_file", "filename": "big.pdf", "file_data": data_url("application/pdf", big)}
        refused = await client.responses.create(model="eyes", input=user(part))
        assert refused.output_text.startswith("(big.pdf was not taken: it is larger than media.max_bytes (")
        assert "x" * 100 not in str(fake.requests[calls:])  # the model never read it


async def test_what_the_parts_cannot_be_is_a_400_naming_the_param(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    png_url = data_url("image/png", png())
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"type": "input_image", "file_id": "file-1", "detail": "auto"}, "file_id", "no Files API"),
        ({"type": "input_file", "file_id": "file-1"}, "file_id", "no Files API"),
        ({"type": "input_image", "image_url": "file:///etc/passwd", "detail": "auto"}, "image_url", "http"),
        (
            {"type": "input_image", "image_url": "data:text/plain;base64,aGk=", "detail": "auto"},
            "image_url",
            "image/",
        ),
        ({"type": "input_file", "filename": "a.pdf", "file_data": "%%"}, "file_data", "not base64"),
        ({"type": "input_file", "file_data": png_url, "file_url": "https://x.test/a"}, "", "one of them"),
        (
            {"type": "input_audio", "input_audio": {"data": "aGk=", "format": "ogg"}},
            "input_audio",
            "wav or mp3",
        ),
        ({"type": "refusal", "refusal": "no"}, "", "agents take input_text, input_image"),
    ]
    async with client_of(url) as client:
        for part, field, reason in cases:
            with pytest.raises(openai.BadRequestError, match=reason) as refused:
                await client.responses.create(model="eyes", input=user(part))
            assert refused.value.param == "input[0].content[1]" + (f".{field}" if field else ""), part
        # a URL the operator did not allow is never fetched: the item is refused in the reply, saying why
        fetched = {"type": "input_file", "file_url": "https://x.test/report.pdf"}
        answer = await client.responses.create(model="eyes", input=user(fetched))
        assert answer.output_text.startswith("(report.pdf was not taken: agentd fetches only URLs")
        # an earlier message's image in a stateless call is said to have been there, not taken again
        history = [
            *user({"type": "input_image", "image_url": png_url, "detail": "auto"}),
            {"role": "assistant", "content": [{"type": "output_text", "text": "A square."}]},
            {"role": "user", "content": "what colour was it?"},
        ]
        await client.responses.create(model="eyes", input=history)
        said = fake.requests[-1].json["messages"]
        assert (
            said[-3]["content"] == "look[an image sent earlier]" and images_in(fake.requests[-1].json) == []
        )


async def test_a_conversation_held_by_an_approval_answers_409_at_once(tmp_path: Path, fake: FakeLLM) -> None:
    keeper = agent_yaml({"files": stdio_server(tmp_path / "files")}, ask=["files.write_file"])
    keeper = keeper.replace("fake/gpt-test", "gpt/gpt-test") + "channels: {webhook: {}}\n"
    async with daemon_on_loopback(tmp_path, {"keeper": keeper}, settings(fake)) as (daemon, url):
        agent = daemon.agent("keeper")
        assert agent is not None
        await agent.state.tool_servers.wait_ready(20)
        script_write(fake, "Saved.")
        async with client_of(url) as client:
            key = {"Idempotency-Key": "save-1"}
            first = await client.responses.create(model="keeper", input="save a note", extra_headers=key)
            [waiting] = await agent.approvals()
            assert waiting["id"] in first.output_text
            with pytest.raises(openai.ConflictError) as held:
                await client.responses.create(
                    model="keeper", input="and another thing", previous_response_id=first.id, timeout=5
                )
            assert held.value.code == "approval_pending" and waiting["id"] in held.value.message
            assert held.value.status_code == 409 and held.value.param is None
            # a retry of the request answered before still gets its reply
            again = await client.responses.with_raw_response.create(
                model="keeper", input="save a note", extra_headers=key, timeout=5
            )
            assert again.headers.get("idempotent-replayed") == "true"
            assert again.parse().id == first.id and again.parse().output_text == first.output_text
        assert len(fake.requests) == 1  # the refused message never reached the model
