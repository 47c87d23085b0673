"""Telegram's files both ways: a message's photo, document, voice note, audio or video as Attachments,
and a reply's files sent with sendPhoto / sendDocument.

A download is Telegram's two steps: getFile turns the file_id into a file_path, then
`<api>/file/bot<token>/<file_path>` serves the bytes (PTB's `get_file` already writes that URL). The
Bot API serves bots files of at most 20 MB (getFile answers "file is too big" past it), and a
message declares each file's size, so an oversized one is refused before either call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import InputFile, Message
from telegram.error import BadRequest
from telegram.ext import ExtBot, filters

from agentd.channels.media import DOWNLOAD_TIMEOUT, check_declared, fetch_limited, kind_of
from agentd.events import Attachment, OutgoingFile

log = logging.getLogger(__name__)
PHOTO_UPLOAD_LIMIT = 10 * 1024 * 1024  # sendPhoto takes photos up to 10 MB; larger images go as documents
UPLOAD_LIMIT = 50 * 1024 * 1024  # what the Bot API lets a bot send; past it Telegram answers 413
Redact = Callable[[str], str]
# the messages with files taken: a video is not watched, but it is named and its caption answered
FILES = (
    filters.PHOTO | filters.Document.ALL | filters.VOICE | filters.AUDIO | filters.VIDEO | filters.VIDEO_NOTE
)


def attachments_of(
    message: Message, bot: ExtBot[Any], redact: Redact, timeout: float = DOWNLOAD_TIMEOUT
) -> tuple[Attachment, ...]:
    """The files of one message, each fetched only when the engine asks (and within its limit)."""
    found: list[Attachment] = []
    if message.photo:
        # Telegram sends each photo in several sizes, smallest first; the last is the original's size
        photo = message.photo[-1]
        jpeg = f"photo_{photo.file_unique_id}.jpg"  # Telegram re-encodes every photo as JPEG
        found.append(_attachment(bot, photo.file_id, "image/jpeg", jpeg, photo.file_size, redact, timeout))
    for field, default_mime, default_name in _FILE_FIELDS:
        item = getattr(message, field)
        if item is not None:
            mime = getattr(item, "mime_type", None) or default_mime
            name = getattr(item, "file_name", None) or default_name
            found.append(_attachment(bot, item.file_id, mime, name, item.file_size, redact, timeout))
    return tuple(found)


# Message fields holding one file: (field, its MIME type when the file states none, its name when it has none)
_FILE_FIELDS: tuple[tuple[str, str | None, str | None], ...] = (
    ("document", None, None),
    ("voice", "audio/ogg", "voice.ogg"),  # voice notes are OGG/Opus, and nameless
    ("audio", None, "audio"),
    ("video", None, "video.mp4"),
    ("video_note", "video/mp4", "video_note.mp4"),  # a round video message: always MP4
)


def _attachment(
    bot: ExtBot[Any],
    file_id: str,
    mime_type: str | None,
    filename: str | None,
    size: int | None,
    redact: Redact,
    timeout: float,
) -> Attachment:
    return Attachment(
        kind=kind_of(mime_type),
        mime_type=mime_type,
        filename=filename,
        size=size,
        download=_downloader(bot, file_id, size, redact, timeout),
    )


def _downloader(
    bot: ExtBot[Any], file_id: str, declared: int | None, redact: Redact, timeout: float
) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        check_declared(declared, max_bytes)
        try:
            file = await bot.get_file(file_id)
        except BadRequest as exc:  # "file is too big" (over 20 MB), "wrong file_id" ...
            raise ConnectionError(f"Telegram getFile refused: {redact(str(exc))}") from None
        check_declared(file.file_size, max_bytes)
        if not file.file_path:
            raise ConnectionError("Telegram getFile gave no file_path")
        try:
            return await fetch_limited(file.file_path, max_bytes, timeout=timeout)
        except ConnectionError as exc:
            raise ConnectionError(redact(str(exc))) from None  # the URL carries the bot token

    return download


async def upload(bot: ExtBot[Any], chat_id: int, thread_id: int | None, file: OutgoingFile) -> Message:
    """One file into a chat: a photo where Telegram shows it as one, else a document."""
    if len(file.data) > UPLOAD_LIMIT:
        # refused here: a 413 reaches PTB as a NetworkError, which would be retried, 50 MB each time
        raise ValueError(f"{file.filename} is larger than the 50 MB Telegram lets a bot send")
    content = InputFile(file.data, filename=file.filename)
    if file.mime_type.startswith("image/") and len(file.data) <= PHOTO_UPLOAD_LIMIT:
        try:
            return await bot.send_photo(chat_id, content, message_thread_id=thread_id)
        except BadRequest as exc:
            # a photo Telegram will not show (PHOTO_INVALID_DIMENSIONS: sides over 10000 in sum or a
            # ratio past 20; IMAGE_PROCESS_FAILED) is still a file it keeps as a document
            log.info("telegram: sendPhoto refused %s (%s); sending it as a document", file.filename, exc)
    return await bot.send_document(chat_id, content, filename=file.filename, message_thread_id=thread_id)
