"""A webhook message as it arrives: JSON (MessageIn, files as base64 or allowed URLs) within
http.max_body_bytes, or a multipart/form-data upload (the same fields, and the files) within what the
agent's media.max_message_bytes needs (`body_limit`)."""

from __future__ import annotations

import json

from fastapi import Request
from pydantic import ValidationError

from agentd.config.media import MediaSpec
from agentd.events import Attachment
from agentd.http.bodies import UPLOADED, MessageIn, read_body, read_json
from agentd.http.errors import ApiError, reasons
from agentd.http.media_in import attachments_of, read_multipart

ENVELOPE = 64 * 1024  # the fields and the multipart boundaries around the files


def body_limit(configured: int, media: MediaSpec) -> int:
    """http.max_body_bytes, or what one message's files may take as base64, whichever is larger."""
    return max(configured, media.max_message_bytes * 4 // 3 + ENVELOPE)


async def read_message(
    request: Request, limit: int, media: MediaSpec
) -> tuple[MessageIn, tuple[Attachment, ...]]:
    """The message and its files; 413 too large, 400 malformed, 422 a field or file that fails."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        message = await read_json(request, MessageIn, limit)
        return message, attachments_of(message.attachments, media.allowed_urls)
    fields, files = await read_multipart(request, await read_body(request, limit))
    raw: dict[str, object] = dict(fields)
    if "attachments" in raw:  # files by URL beside the uploaded ones, as JSON
        try:
            raw["attachments"] = json.loads(fields["attachments"])
        except json.JSONDecodeError as e:
            raise ApiError(400, f"attachments: malformed JSON: {e}") from None
    try:
        message = MessageIn.model_validate(raw, context={UPLOADED: len(files)})
    except ValidationError as e:
        raise ApiError(422, "invalid request", detail=reasons(e.errors())) from None
    return message, (*files, *attachments_of(message.attachments, media.allowed_urls))
