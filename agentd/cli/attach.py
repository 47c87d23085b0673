"""`/attach PATH` in `agentd chat`: a file from this computer, sent with the next message (in process
as an Attachment; to a daemon as a base64 attachment of the REPL route)."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

from agentd.events import Attachment
from agentd.http.media_in import kind_of
from agentd.messages import human_size

COMMAND = "/attach"


def is_attach(line: str) -> bool:
    return line.strip() == COMMAND or line.strip().startswith(COMMAND + " ")


def attachment_from(line: str) -> Attachment:
    """The file `/attach PATH` names (~ expanded); OSError when it cannot be read, ValueError for no path."""
    path = line.strip()[len(COMMAND) :].strip().strip("'\"")
    if not path:
        raise ValueError("/attach needs a file: /attach PATH")
    file = Path(path).expanduser()
    data = file.read_bytes()
    mime = mimetypes.guess_type(file.name)[0]
    return Attachment(kind_of(mime), mime, file.name, len(data), data)


def said(attachment: Attachment) -> str:
    return (
        f"attached {attachment.filename} ({attachment.mime_type or 'unknown type'},"
        f" {human_size(attachment.size or 0)}): it goes with your next message"
    )


def as_json(attachments: tuple[Attachment, ...]) -> list[dict[str, Any]]:
    """The attachments as the REPL route takes them (agentd.http.media_in.AttachmentIn)."""
    return [
        {
            "filename": a.filename,
            "kind": a.kind,
            "data": base64.b64encode(a.data or b"").decode(),
            **({"mime_type": a.mime_type} if a.mime_type else {}),
        }
        for a in attachments
    ]
