"""Files sent over HTTP, as the engine takes them (agentd.events.Attachment): a webhook message's
`attachments` (base64 `data`, or a `url` the agent's media.allowed_urls lets agentd fetch), a
multipart upload, and the OpenAI endpoints' images, audio and files by URL (`image_of`, `audio_of`,
`data_url`): Chat Completions' content parts here, the Responses API's in response_parts.py.

The engine decides the limits (agentd.engine.media); a URL is fetched only when the turn asks, never
past the byte limit it is given. A malformed item is a 4xx with the reason, before anything runs.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Literal

import httpx
from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from agentd.events import Attachment, MediaTooLarge
from agentd.http.errors import ApiError

MAX_FILES = 16  # files in one message
# what base64.b64decode(validate=True) takes: groups of four, padded
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_DATA_URL_PREFIX = "data:"


class AttachmentIn(BaseModel):
    """A file with a webhook message: its bytes as base64 `data`, or a `url` to fetch them from (one
    the agent's media.allowed_urls allows)."""

    # what `_one_source` requires, for clients and validators: exactly one of the two is a string
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["data"], "properties": {"data": {"type": "string"}, "url": {"type": "null"}}},
                {"required": ["url"], "properties": {"url": {"type": "string"}, "data": {"type": "null"}}},
            ]
        },
    )

    filename: str | None = Field(default=None, max_length=255)
    mime_type: str | None = Field(default=None, max_length=255, pattern=r"^[\w.+-]+/[\w.+-]+$")
    kind: Literal["image", "audio", "document", "file"] | None = Field(
        default=None,
        description="default: read from mime_type (image/*, audio/*, text/* and PDFs as documents)",
    )
    data: str | None = Field(default=None, pattern=BASE64_PATTERN, description="the file's bytes, base64")
    url: str | None = Field(
        default=None, max_length=2048, pattern=r"^https?://", description="where to fetch it"
    )

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentIn:
        if (self.data is None) == (self.url is None):
            raise ValueError("give the file's bytes as `data` (base64) or a `url`, one of them")
        return self


def kind_of(mime_type: str | None) -> str:
    major = (mime_type or "").split("/", 1)[0]
    if major in ("image", "audio"):
        return major
    if major == "text" or mime_type == "application/pdf":
        return "document"
    return "file"


def decoded(data: str, where: str, status: int = 422, param: str | None = "messages") -> bytes:
    """Base64 bytes, or a 422 (a webhook field) / 400 with `param` (a /v1 part) naming where."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(
            status, f"{where}: not base64", **({"param": param} if status == 400 else {})
        ) from None


def attachments_of(items: Sequence[AttachmentIn], allowed_urls: Sequence[str]) -> tuple[Attachment, ...]:
    """The webhook's attachments as the engine takes them; 422 for bad base64 or a URL not allowed."""
    if len(items) > MAX_FILES:
        raise ApiError(422, f"attachments: at most {MAX_FILES} files in one message")
    out = []
    for i, item in enumerate(items):
        kind = item.kind or kind_of(item.mime_type)
        if item.data is not None:
            data = decoded(item.data, f"attachments[{i}].data")
            out.append(Attachment(kind, item.mime_type, item.filename, len(data), data))
        else:
            assert item.url is not None
            out.append(from_url(item.url, allowed_urls, kind, item))
    return tuple(out)


def from_url(
    url: str, allowed_urls: Sequence[str], kind: str, item: AttachmentIn | None = None
) -> Attachment:
    """A file at a URL the operator allowed (media.allowed_urls: prefixes), fetched when the turn asks;
    any other URL is an item the turn refuses, saying why (the rest of the message is answered)."""
    allowed = any(url.startswith(prefix) for prefix in allowed_urls)
    filename = (
        item.filename if item is not None and item.filename else url.rsplit("/", 1)[-1].split("?")[0] or None
    )
    mime_type = item.mime_type if item is not None else None
    return Attachment(kind, mime_type, filename, None, None, fetcher(url) if allowed else refused(url))


def refused(url: str) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        raise PermissionError(
            f"agentd fetches only URLs the agent's media.allowed_urls allows, not {url[:100]}"
        )

    return download


def fetcher(url: str) -> Callable[[int], Awaitable[bytes]]:
    """Fetch `url` (no redirects: the allowed prefix is the one checked), at most `max_bytes` of it;
    the engine bounds the time (media.download_timeout_s)."""

    async def download(max_bytes: int) -> bytes:
        async with httpx.AsyncClient() as client, client.stream("GET", url) as response:
            response.raise_for_status()
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise MediaTooLarge(max_bytes)
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise MediaTooLarge(max_bytes)
                chunks.append(chunk)
        return b"".join(chunks)

    return download


async def read_multipart(request: Request, body: bytes) -> tuple[dict[str, str], tuple[Attachment, ...]]:
    """A multipart/form-data webhook message: its text fields, and its files (any field name)."""

    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        form = await MultiPartParser(request.headers, stream(), max_files=MAX_FILES, max_fields=32).parse()
    except MultiPartException as e:
        raise ApiError(400, f"malformed multipart body: {e.message}") from None
    fields: dict[str, str] = {}
    files: list[Attachment] = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            data = await value.read()
            mime = value.content_type if value.content_type != "application/octet-stream" else None
            files.append(Attachment(kind_of(mime), mime, value.filename, len(data), data))
        elif name in fields:
            raise ApiError(422, f"{name}: given twice")
        else:
            fields[name] = value
    await form.close()
    return fields, tuple(files)


def content_parts(
    parts: Sequence[Any], index: int, allowed_urls: Sequence[str]
) -> tuple[str, tuple[Attachment, ...]]:
    """A Chat Completions user message's content parts: its text, and its images (`image_url`: a data
    URL or an allowed URL) and audio (`input_audio`: base64 `data` in a `format`) as attachments."""
    texts: list[str] = []
    files: list[Attachment] = []
    for j, part in enumerate(parts):
        where = f"messages[{index}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str):
                raise ApiError(400, f"{where}.image_url.url: a string is required", param="messages")
            files.append(image_of(url, f"{where}.image_url.url", allowed_urls, "messages"))
        elif kind == "input_audio":
            files.append(audio_of(part.get("input_audio"), f"{where}.input_audio", "messages"))
        else:
            raise ApiError(
                400,
                f"{where}: a {kind!r} content part; agents take text, image_url and input_audio",
                param="messages",
            )
    return "".join(texts), at_most(files, f"messages[{index}]", "messages")


def at_most(files: list[Attachment], where: str, param: str) -> tuple[Attachment, ...]:
    if len(files) > MAX_FILES:
        raise ApiError(400, f"{where}: at most {MAX_FILES} files in one message", param=param)
    return tuple(files)


def audio_of(audio: Any, where: str, param: str) -> Attachment:
    """An `input_audio` object (both OpenAI APIs): base64 `data` in a `format` of wav or mp3."""
    fmt = audio.get("format") if isinstance(audio, dict) else None
    if fmt not in ("wav", "mp3") or not isinstance(audio.get("data"), str):
        raise ApiError(400, f"{where}: base64 `data` and a `format` of wav or mp3", param=param)
    data = decoded(audio["data"], f"{where}.data", 400, param)
    return Attachment("audio", "audio/wav" if fmt == "wav" else "audio/mpeg", f"audio.{fmt}", len(data), data)


def image_of(url: str, where: str, allowed_urls: Sequence[str], param: str) -> Attachment:
    """An image by `url` (both OpenAI APIs): a data URL of an image, or an http(s) URL (fetched only
    under media.allowed_urls)."""
    if url.startswith(_DATA_URL_PREFIX):
        mime, data = data_url(url, where, param, "image/")
        return Attachment("image", mime, None, len(data), data)
    return by_url(url, where, allowed_urls, param, "image")


def by_url(
    url: str,
    where: str,
    allowed_urls: Sequence[str],
    param: str,
    kind: str,
    filename: str | None = None,
    mime_type: str | None = None,
) -> Attachment:
    """A file at an http(s) URL, fetched when the turn asks (only under media.allowed_urls)."""
    if not url.startswith(("http://", "https://")):
        raise ApiError(400, f"{where}: expected a data URL or an http(s) URL", param=param)
    found = from_url(url, allowed_urls, kind)
    return Attachment(kind, mime_type, filename or found.filename, None, None, found.download)


def data_url(url: str, where: str, param: str, major: str = "") -> tuple[str | None, bytes]:
    """A base64 data URL's type (None when it names none) and bytes; `major`: the type it must be
    (`image/`), or any."""
    head, sep, payload = url[len(_DATA_URL_PREFIX) :].partition(",")
    mime, _, encoding = head.partition(";")
    if not sep or encoding != "base64" or not mime.startswith(major):
        shape = f"data:{major or '<type>/'}<subtype>;base64,<data>"
        raise ApiError(400, f"{where}: a data URL must be {shape}", param=param)
    return mime or None, decoded(payload, where, 400, param)
