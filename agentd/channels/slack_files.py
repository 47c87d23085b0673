"""Slack's files both ways: a message's `files` as Attachments, and a reply's files uploaded.

A file shared in a message is private to the workspace: its `url_private_download` opens only with
`Authorization: Bearer <bot token>` (and the files:read scope). Without them Slack does not refuse the
request; it answers 200 with its sign-in page, which would reach the model as the "file" — so an HTML
answer for a file that is not HTML is taken as the refusal it is. Uploads go the way Slack has required
since files.upload was retired: files.getUploadURLExternal, the bytes to the URL it gives, then
files.completeUploadExternal into the channel and thread (slack_sdk's `files_upload_v2` does the three).
A file shared from another organisation over Slack Connect arrives as its id only
(`file_access: check_file_info`): files.info gives the rest when the file is fetched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agentd.channels.media import DOWNLOAD_TIMEOUT, check_declared, fetch_limited, kind_of
from agentd.events import Attachment, OutgoingFile

FILE_SCOPES = ("files:read", "files:write")  # to fetch what people share, and to upload a reply's files

# A file in one of these modes has no bytes to fetch: deleted, or past a free workspace's history limit.
_NO_CONTENT_MODES = frozenset({"tombstone", "hidden_by_limit"})


def missing_file_scopes(headers: Mapping[str, Any]) -> list[str]:
    """The file scopes a bot token lacks, read off the `x-oauth-scopes` header Slack sends with every
    Web API answer (none missing when the header is absent: nothing to go by)."""
    granted = next((str(v) for k, v in headers.items() if k.lower() == "x-oauth-scopes"), None)
    if granted is None:
        return []
    have = {scope.strip() for scope in granted.split(",")}
    return [scope for scope in FILE_SCOPES if scope not in have]


def attachments_of(
    event: dict[str, Any], bot_token: str, web: AsyncWebClient | None, timeout: float = DOWNLOAD_TIMEOUT
) -> tuple[Attachment, ...]:
    """The files of a message event, each fetched with the bot token only when the engine asks."""
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    found: list[Attachment] = []
    for item in files:
        if not isinstance(item, dict) or item.get("mode") in _NO_CONTENT_MODES:
            continue
        if item.get("file_access") == "check_file_info" and isinstance(item.get("id"), str) and web:
            # type, size and name unknown until files.info: the engine reads them off the bytes
            found.append(
                Attachment(kind="file", download=_connect_downloader(web, item["id"], bot_token, timeout))
            )
            continue
        if _url_of(item) is None:
            continue
        mime, size, name = _described(item)
        download = _downloader(item, bot_token, timeout)
        found.append(
            Attachment(kind=kind_of(mime), mime_type=mime, filename=name, size=size, download=download)
        )
    return tuple(found)


def _url_of(item: dict[str, Any]) -> str | None:
    url = item.get("url_private_download") or item.get("url_private")
    return url if isinstance(url, str) else None


def _described(item: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    """A file object's MIME type, size and name, where it states them."""
    mime, size, name = item.get("mimetype"), item.get("size"), item.get("name")
    return (
        mime if isinstance(mime, str) else None,
        size if isinstance(size, int) else None,
        name if isinstance(name, str) else None,
    )


def _downloader(item: dict[str, Any], bot_token: str, timeout: float) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        return await _fetch(item, bot_token, max_bytes, timeout)

    return download


def _connect_downloader(
    web: AsyncWebClient, file_id: str, bot_token: str, timeout: float
) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        try:
            info = await web.files_info(file=file_id)
        except SlackApiError as exc:
            data = exc.response.data
            why = data.get("error") if isinstance(data, dict) else f"HTTP {exc.response.status_code}"
            raise ConnectionError(f"Slack files.info refused: {why}") from None
        item = info.get("file")
        if not isinstance(item, dict) or _url_of(item) is None:
            raise ConnectionError("Slack files.info gave no URL for the file")
        return await _fetch(item, bot_token, max_bytes, timeout)

    return download


async def _fetch(item: dict[str, Any], bot_token: str, max_bytes: int, timeout: float) -> bytes:
    mime, size, _ = _described(item)
    check_declared(size, max_bytes)
    url = _url_of(item)
    assert url is not None
    headers = {"Authorization": f"Bearer {bot_token}"}
    return await fetch_limited(
        url, max_bytes, headers=headers, timeout=timeout, refuse_html=mime != "text/html"
    )


async def upload(web: AsyncWebClient, channel: str, thread_ts: str | None, file: OutgoingFile) -> str:
    """Share one file in a channel (and thread); returns the file's id."""
    done = await web.files_upload_v2(
        channel=channel, thread_ts=thread_ts, content=file.data, filename=file.filename, title=file.filename
    )
    return str(done["file"]["id"])
