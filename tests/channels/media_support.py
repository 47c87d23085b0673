"""What the media tests of every channel share: a host that takes a message's files the way the engine
does (each within a byte limit, refused past it) and answers with files of its own, and small real
files to send."""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Sequence

from agentd.events import InboundEvent, MediaTooLarge, OutgoingFile, Reply, ReplySink
from testkit.channel_host import RecordingHost


def png(width: int = 4, height: int = 3, shade: int = 200) -> bytes:
    """A real PNG (a grey rectangle): what a screenshot is on the wire."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([shade]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)) * 8 + b"\xff\xd9"  # starts and ends as one
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
OGG = b"OggS\x00\x02" + bytes(200) + b"OpusHead" + bytes(100)


class MediaHost(RecordingHost):
    """Fetches every attachment with `max_bytes` (as the engine does) before answering; `fetched[i]` is
    what the i-th event's attachments gave: their bytes, or the MediaTooLarge raised. Replies carry
    `reply_files`."""

    def __init__(self, *, max_bytes: int = 1 << 20, reply_files: Sequence[OutgoingFile] = (), **kw: object):
        super().__init__(**kw)  # type: ignore[arg-type]
        self.max_bytes = max_bytes
        self.reply_files = tuple(reply_files)
        self.fetched: list[list[bytes | Exception]] = []
        self._taken: set[tuple[str, str | None]] = set()

    async def dispatch(self, event: InboundEvent, sink: ReplySink | None = None) -> Reply:
        marker = (event.channel, event.event_id)
        if marker in self._taken:  # a repeat (it may come while the first is still fetching): not taken
            return await super().dispatch(event, sink)  # again, and answered once
        self._taken.add(marker)
        got: list[bytes | Exception] = []
        for attachment in event.attachments:
            try:
                if attachment.data is not None:
                    got.append(attachment.data)
                else:
                    assert attachment.download is not None
                    got.append(await attachment.download(self.max_bytes))
            except (MediaTooLarge, ConnectionError, TimeoutError) as exc:
                got.append(exc)
        self.fetched.append(got)
        reply = await super().dispatch(event, sink)
        return reply if reply.duplicate else dataclasses.replace(reply, files=self.reply_files)
