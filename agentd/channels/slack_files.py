"""Slack's files both ways: a message's `files` as Attachments, and a reply's files uploaded.

A file shared in a message is private to the workspace: its `url_private_download` opens only with
`Authorization: Bearer <bot token>` (and the files:read scope). Without them Slack does not refuse the
request; it answers 200 with its sign-in page, which would reach the model as the "file" — so an HTML
answer for a file that is not HTML is taken as the refusal it is. Uploads go the way Slack has required
since files.upload was retired: files.getUploadURLExternal, the bytes to the URL it gives, then
files.completeUploadExternal into the channel and thread (slack_sdk's `files_upload_v2` does the three).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agentd.channels.media import DOWNLOAD_TIMEOUT, check_declared, fetch_limited, kind_of
from agentd.events import Attachment, OutgoingFile

# A file in one of these modes has no bytes to fetch: deleted, or past a free workspace's history limit.
_NO_CONTENT_MODES = frozenset({"tombstone", "hidden_by_limit"})


def attachments_of(
    event: dict[str, Any], bot_token: str, timeout: float = DOWNLOAD_TIMEOUT
) -> tuple[Attachment, ...]:
    """The files of a message event, each fetched with the bot token only when the engine asks."""
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    found: list[Attachment] = []
    for item in files:
        if not isinstance(item, dict) or item.get("mode") in _NO_CONTENT_MODES:
            continue
        url = item.get("url_private_download") or item.get("url_private")
        if not isinstance(url, str):
            continue
        mime = item.get("mimetype") if isinstance(item.get("mimetype"), str) else None
        size = item.get("size") if isinstance(item.get("size"), int) else None
        name = item.get("name") if isinstance(item.get("name"), str) else None
        found.append(
            Attachment(
                kind=kind_of(mime),
                mime_type=mime,
                filename=name,
                size=size,
                download=_downloader(url, size, bot_token, mime, timeout),
            )
        )
    return tuple(found)


def _downloader(
    url: str, declared: int | None, bot_token: str, mime: str | None, timeout: float
) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        check_declared(declared, max_bytes)
        headers = {"Authorization": f"Bearer {bot_token}"}
        return await fetch_limited(
            url, max_bytes, headers=headers, timeout=timeout, refuse_html=mime != "text/html"
        )

    return download


async def upload(web: AsyncWebClient, channel: str, thread_ts: str | None, file: OutgoingFile) -> str:
    """Share one file in a channel (and thread); returns the file's id."""
    done = await web.files_upload_v2(
        channel=channel, thread_ts=thread_ts, content=file.data, filename=file.filename, title=file.filename
    )
    return str(done["file"]["id"])
