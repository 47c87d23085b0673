"""Discord's files both ways: a message's `attachments` as Attachments, and a reply's files uploaded.

An attachment says its size, content type and a CDN URL that opens without the bot token (the URL is
signed, and expires); a voice message is an OGG attachment with a duration and a waveform. A reply's
file goes as a multipart message (`payload_json` + `files[0]`), which discord.py writes from a
discord.File.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from agentd.channels.media import DOWNLOAD_TIMEOUT, check_declared, fetch_limited, kind_of
from agentd.events import Attachment, OutgoingFile


def attachments_of(message: discord.Message, timeout: float = DOWNLOAD_TIMEOUT) -> tuple[Attachment, ...]:
    """The files of one message, each fetched only when the engine asks (and within its limit)."""
    return tuple(
        Attachment(
            kind="audio" if item.is_voice_message() else kind_of(item.content_type),
            mime_type=item.content_type,
            filename=item.filename,
            size=item.size,
            download=_downloader(item.url, item.size, timeout),
        )
        for item in message.attachments
    )


def _downloader(url: str, declared: int, timeout: float) -> Callable[[int], Awaitable[bytes]]:
    async def download(max_bytes: int) -> bytes:
        check_declared(declared, max_bytes)
        return await fetch_limited(url, max_bytes, timeout=timeout)

    return download


async def send_file(target: discord.Message, file: OutgoingFile, nonce: str) -> discord.Message:
    """One file into the channel of the message it answers."""
    channel: Any = target.channel
    upload = discord.File(io.BytesIO(file.data), filename=file.filename)
    sent: discord.Message = await channel.send(file=upload, nonce=nonce)
    return sent
