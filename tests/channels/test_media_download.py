"""The one download every channel's attachments use: it stops at the byte limit while the body is
still arriving (a body without an end is refused, not read forever), gives up after its timeout, and
says a refusal as ConnectionError. Against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agentd.channels.media import fetch_limited, kind_of
from agentd.events import MediaTooLarge


@pytest.fixture
async def base() -> AsyncIterator[str]:

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()  # no Content-Length: chunked, its size unknown until its end
        await response.prepare(request)
        try:
            while True:
                await response.write(bytes(65536))
        except (ConnectionError, asyncio.CancelledError):
            return response

    async def stalled(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"first bytes")
        await asyncio.sleep(30)
        return response

    async def small(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 100, headers={"Content-Type": "image/png"})

    async def login(request: web.Request) -> web.Response:
        return web.Response(text="<html>sign in</html>", content_type="text/html")

    async def gone(request: web.Request) -> web.Response:
        return web.Response(status=403, text="forbidden")

    app = web.Application()
    for path, handler in {
        "/endless": endless,
        "/stalled": stalled,
        "/small": small,
        "/login": login,
        "/gone": gone,
    }.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_body_without_an_end_is_refused_at_the_limit(base: str) -> None:
    with pytest.raises(MediaTooLarge) as refused:
        await fetch_limited(f"{base}/endless", 1 << 20)
    assert refused.value.limit == 1 << 20


async def test_a_stalled_download_ends_at_its_timeout(base: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await fetch_limited(f"{base}/stalled", 1 << 20, timeout=0.3)
    assert loop.time() - started < 2.0


async def test_a_file_within_the_limit_is_read_whole(base: str) -> None:
    assert await fetch_limited(f"{base}/small", 100) == b"x" * 100
    with pytest.raises(MediaTooLarge):  # its Content-Length says 100: refused before the body
        await fetch_limited(f"{base}/small", 99)


async def test_refusals_are_connection_errors(base: str) -> None:
    with pytest.raises(ConnectionError, match="HTTP 403"):
        await fetch_limited(f"{base}/gone", 1000)
    with pytest.raises(ConnectionError, match="HTML page"):
        await fetch_limited(f"{base}/login", 1000, refuse_html=True)
    assert await fetch_limited(f"{base}/login", 1000) == b"<html>sign in</html>"  # an HTML file is a file
    with pytest.raises(ConnectionError):
        await fetch_limited("http://127.0.0.1:9/nothing-listens", 1000)


def test_kinds_read_off_mime_types() -> None:
    assert [
        kind_of(m) for m in ("image/webp", "audio/ogg", "application/pdf", "text/csv", "video/mp4", None)
    ] == [
        "image",
        "audio",
        "document",
        "document",
        "file",
        "file",
    ]
