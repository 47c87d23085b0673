"""What every chat channel does the same way with files: fetch one within a byte limit and a time limit,
and read a MIME type as the kind of file it is.

A platform's own part (where the file is, which token opens it) lives beside its channel
(telegram_files, slack_files, discord_files); this module only streams bytes. A download stops at the
first byte past the limit instead of reading the whole body and measuring it afterwards, so a 2 GB
file costs the daemon `max_bytes`, not 2 GB. Its failures are the built-in ones, so the engine needs
no channel's types to tell them apart: MediaTooLarge past the limit, TimeoutError after `timeout`
seconds, ConnectionError for a refusal (a 4xx/5xx, a login page instead of the file).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Mapping

import httpx

from agentd.events import MediaTooLarge

DOWNLOAD_TIMEOUT = 30.0  # seconds for a whole download, connection included
_CHUNK = 64 * 1024


def kind_of(mime_type: str | None) -> str:
    """image | audio | document | file, as the engine reads an Attachment's `kind`."""
    if not mime_type:
        return "file"
    major = mime_type.split("/", 1)[0].lower()
    if major in ("image", "audio"):
        return major
    if major == "text" or mime_type.lower() in _DOCUMENT_TYPES:
        return "document"
    return "file"


_DOCUMENT_TYPES = frozenset(
    {"application/pdf", "application/json", "application/xml", "application/x-yaml", "application/yaml"}
)


def check_declared(size: int | None, max_bytes: int) -> None:
    """Refuse before any request when the platform already said the file is too large."""
    if size is not None and size > max_bytes:
        raise MediaTooLarge(max_bytes)


async def fetch_limited(
    url: str,
    max_bytes: int,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = DOWNLOAD_TIMEOUT,
    refuse_html: bool = False,
) -> bytes:
    """GET `url` and return its body, raising MediaTooLarge as soon as it passes `max_bytes`.

    `refuse_html`: a platform that answers an unauthorised download with its login page (Slack does,
    with a 200) would otherwise hand that page on as the file.
    """
    try:
        async with asyncio.timeout(timeout):
            return await _fetch(url, max_bytes, dict(headers or {}), refuse_html)
    except httpx.HTTPError as exc:
        raise ConnectionError(f"download failed: {type(exc).__name__}: {exc}") from exc


@functools.cache
def _tls() -> ssl.SSLContext:
    # built once: a client's own default context loads the CA bundle again, 36 ms of every download
    return httpx.create_ssl_context()


async def _fetch(url: str, max_bytes: int, headers: dict[str, str], refuse_html: bool) -> bytes:
    # no client timeout of its own: asyncio.timeout above bounds the whole download, not each read
    async with (
        httpx.AsyncClient(timeout=None, follow_redirects=True, verify=_tls()) as client,
        client.stream("GET", url, headers=headers) as response,
    ):
        if response.status_code != 200:
            raise ConnectionError(f"download refused: HTTP {response.status_code}")
        if refuse_html and response.headers.get("content-type", "").startswith("text/html"):
            raise ConnectionError("download answered with an HTML page (a login page: is the token allowed?)")
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise MediaTooLarge(max_bytes)  # said before the body: not one byte of it is read
        body = bytearray()
        async for chunk in response.aiter_bytes(_CHUNK):
            body += chunk
            if len(body) > max_bytes:
                raise MediaTooLarge(max_bytes)
        return bytes(body)
