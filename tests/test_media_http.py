"""Files over HTTP (issue 21): the webhook's multipart upload and JSON attachments (base64, or a URL
the operator allowed), and the OpenAI endpoint's content parts sent by the official `openai` client.
A daemon on loopback answers, its agents' model is the fake OpenAI server, which checks the image
parts it gets; each test asserts what reached the model and what was stored."""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
from aiohttp import web
from PIL import Image

from agentd.daemon import Daemon
from agentd.store.queries import ActiveThread, MediaBlobs
from testkit.fake_llm import FakeLLM
from testkit.fake_media import images_in
from testkit.media_files import png, wav_tone
from tests.support import daemon_on_loopback

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RED = (220, 20, 20)


@pytest.fixture
async def files_server() -> AsyncIterator[str]:
    """A file server on loopback (a CDN the operator allows): /red.png, and /big (2 MB)."""

    async def red(request: web.Request) -> web.Response:
        return web.Response(body=png(RED), content_type="image/png")

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"\xff" * 2_000_000, content_type="image/jpeg")

    app = web.Application()
    app.router.add_get("/red.png", red)
    app.router.add_get("/big", big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def served(tmp_path: Path, fake: FakeLLM, files_server: str) -> AsyncIterator[tuple[Daemon, str]]:
    settings = (
        f"providers: {{gpt: {{kind: openai, base_url: '{fake.openai_base_url}', api_key: k, max_retries: 0}}}}\n"
        f"http: {{token: {TOKEN}}}\n"
    )
    eyes = (
        "model: gpt/gpt-4o\nmemory: {scope: thread}\nchannels: {webhook: {}}\n"
        f"media: {{allowed_urls: ['{files_server}/'], max_bytes: 1000000, transcribe: gpt/whisper-1}}\n"
    )
    async with daemon_on_loopback(tmp_path, {"eyes": eyes}, settings) as running:
        yield running


def colour(data: bytes) -> tuple[int, ...]:
    with Image.open(io.BytesIO(data)) as image:
        return tuple(image.convert("RGB").getpixel((0, 0)))  # type: ignore[arg-type]


async def stored_media(daemon: Daemon, key: str) -> list[str]:
    agent = daemon.agent("eyes")
    assert agent is not None
    thread = await agent.state.store.read(ActiveThread(key))
    shas = [p.sha256 for m in thread.messages for p in m.message.media]
    blobs = await agent.state.store.read(MediaBlobs(key, shas))
    return [sha for sha in shas if sha in blobs]


async def test_a_multipart_upload_reaches_the_model_and_is_stored(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    daemon, url = served
    photo = png(RED, (300, 200))
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(
            f"{url}/agents/eyes/messages",
            headers=AUTH,
            data={"conversation_id": "up", "text": "what is this?", "user_id": "ana"},
            files={"file": ("shot.png", photo, "image/png")},
        )
    assert r.status_code == 200, r.text
    [sent] = images_in(fake.requests[-1].json)
    assert colour(sent)[:3] == RED
    assert await stored_media(daemon, "webhook:up") == [hashlib.sha256(photo).hexdigest()]
    # an upload is bounded by the files the agent takes (media.max_message_bytes), not http.max_body_bytes
    # (1 MiB): a file past media.max_bytes is read in, and refused saying which limit
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(
            f"{url}/agents/eyes/messages",
            headers=AUTH,
            data={"conversation_id": "up", "text": "and this?"},
            files={"file": ("big.bin", b"\0" * 1_500_000, "application/octet-stream")},
        )
    assert r.status_code == 200, r.text
    assert r.json()["reply"].startswith("(big.bin was not taken: it is larger than media.max_bytes")


async def test_json_attachments_by_base64_and_by_an_allowed_url(
    served: tuple[Daemon, str], fake: FakeLLM, files_server: str
) -> None:
    daemon, url = served
    blue = png((20, 20, 220))
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(
            f"{url}/agents/eyes/messages",
            headers=AUTH,
            json={
                "conversation_id": "js",
                "attachments": [
                    {"data": base64.b64encode(blue).decode(), "mime_type": "image/png", "filename": "b.png"},
                    {"url": f"{files_server}/red.png"},
                ],
            },
        )
        assert r.status_code == 200, r.text
        assert len(images_in(fake.requests[-1].json)) == 2
        assert len(await stored_media(daemon, "webhook:js")) == 2
        # a URL the operator did not allow is never fetched: the item is refused, saying why
        r = await http.post(
            f"{url}/agents/eyes/messages",
            headers=AUTH,
            json={"conversation_id": "js", "text": "x", "attachments": [{"url": "http://example.com/a.png"}]},
        )
        assert r.status_code == 200 and r.json()["reply"].startswith(
            "(a.png was not taken: agentd fetches only URLs the agent's media.allowed_urls allows"
        )
        # a download past media.max_bytes is stopped and said; the text is still answered
        r = await http.post(
            f"{url}/agents/eyes/messages",
            headers=AUTH,
            json={
                "conversation_id": "js",
                "text": "and this",
                "attachments": [{"url": f"{files_server}/big"}],
            },
        )
        assert r.status_code == 200 and r.json()["reply"].startswith(
            "(big was not taken: it is larger than media.max_bytes"
        )
        for body in ({"conversation_id": "js"}, {"conversation_id": "js", "attachments": [{"data": "%%"}]}):
            r = await http.post(f"{url}/agents/eyes/messages", headers=AUTH, json=body)
            assert r.status_code == 422, r.text


async def test_the_openai_endpoint_takes_the_official_clients_image_and_audio_parts(
    served: tuple[Daemon, str], fake: FakeLLM, files_server: str
) -> None:
    daemon, url = served
    photo = png(RED, (120, 80))
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="eyes",
            user="ana",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what colour?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64," + base64.b64encode(photo).decode()},
                        },
                    ],
                }
            ],
        )
        assert completion.choices[0].message.content.startswith("fake reply to:")  # type: ignore[union-attr]
        [sent] = images_in(fake.requests[-1].json)
        assert colour(sent)[:3] == RED
        assert await stored_media(daemon, "openai:ana") == [hashlib.sha256(photo).hexdigest()]
        # an image by an allowed URL, and a voice note as input_audio
        fake.transcript("it is red")
        await client.chat.completions.create(
            model="eyes",
            user="ana",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"{files_server}/red.png"}},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": base64.b64encode(wav_tone()).decode(), "format": "wav"},
                        },
                    ],
                }
            ],
        )
        said = fake.requests[-1].json["messages"][-1]["content"]
        assert [p["type"] for p in said] == ["image_url", "text"]
        assert "transcript: it is red" in said[1]["text"]
        refused = await client.chat.completions.create(
            model="eyes",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}],
                }
            ],
        )
        assert "media.allowed_urls" in (refused.choices[0].message.content or "")
        with pytest.raises(openai.BadRequestError, match="expected a data URL or an http"):
            await client.chat.completions.create(
                model="eyes",
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
                    }
                ],
            )


async def test_the_inspector_shows_a_thumbnail_beside_the_message(
    served: tuple[Daemon, str], fake: FakeLLM
) -> None:
    _, url = served
    photo = png(RED, (900, 600))
    sha = hashlib.sha256(photo).hexdigest()
    async with httpx.AsyncClient(trust_env=False, base_url=url) as http:
        r = await http.post(
            "/agents/eyes/messages",
            headers=AUTH,
            data={"conversation_id": "ui", "text": "look"},
            files={"file": ("shot.png", photo, "image/png")},
        )
        assert r.status_code == 200
        page = await http.get("/ui/agents/eyes/conversations/webhook:ui", headers=AUTH)
        assert page.status_code == 200
        src = f"/ui/agents/eyes/conversations/webhook:ui/media/{sha}"
        assert f'<img class="thumb" src="{src}"' in page.text and "[image shot.png (image/png, " in page.text
        assert "img-src 'self'" in page.headers["content-security-policy"]
        thumb = await http.get(src, headers=AUTH)
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"  # no transparency
        with Image.open(io.BytesIO(thumb.content)) as image:
            assert image.size == (240, 160)
        assert (await http.get(src)).status_code == 401  # behind the token, as every page
        assert (await http.get(src.replace(sha, "0" * 64), headers=AUTH)).status_code == 404
