"""A webhook message as it arrives: JSON (MessageIn, files as base64 or allowed URLs) within
http.max_body_bytes, or a multipart/form-data upload (the same fields, and the files) within what the
agent's media.max_message_bytes needs (`body_limit`); `multipart_schema` says the second to OpenAPI."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import ValidationError

from agentd.config.media import MediaSpec
from agentd.events import Attachment
from agentd.http.bodies import UPLOADED, MessageIn, inlined, read_body, read_json
from agentd.http.errors import ApiError, reasons
from agentd.http.media_in import MAX_FILES, attachments_of, read_multipart

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
    fields, files = await read_multipart(request, await read_body(request, body_limit(limit, media)))
    raw: dict[str, object] = dict(fields)
    if _is_number(fields.get("sent_at")):  # a form field is text: epoch seconds come as "1767225600"
        raw["sent_at"] = float(fields["sent_at"])
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


def _is_number(text: str | None) -> bool:
    try:
        return text is not None and text.strip() == text and float(text) == float(text)  # not NaN
    except ValueError:
        return False


def multipart_schema() -> dict[str, Any]:
    """The multipart/form-data body: MessageIn's fields as text fields (`attachments` as a JSON part),
    and the files as parts with a filename (`file` here; any field name is taken), what `read_message`
    reads. A form field cannot be null, nor a number: the fields' schemas say only what text they take."""
    fields = {k: _never_null(v) for k, v in inlined(MessageIn.model_json_schema())["properties"].items()}
    fields["file"] = {
        "type": "array",
        "maxItems": MAX_FILES,
        "items": {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream"},
        "description": "the message's files, each a part with a filename and its Content-Type "
        "(any field name is taken as a file when its part has a filename)",
    }
    return {
        "type": "object",
        "properties": fields,
        "required": ["conversation_id"],
        "additionalProperties": False,
        # what MessageIn requires: some text, or a file (uploaded, or in `attachments`)
        "anyOf": [
            {"required": ["text"], "properties": {"text": {"minLength": 1}}},
            {"required": ["attachments"], "properties": {"attachments": {"minItems": 1}}},
            {"required": ["file"], "properties": {"file": {"minItems": 1}}},
        ],
    }


def _never_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without its null form, nor a default (a form field is text or absent)."""
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    forms = [f for f in schema.get("anyOf", []) if f.get("type") != "null"]
    if len(forms) == 1:
        return {**rest, **forms[0]}
    return {**rest, "anyOf": forms} if forms else rest
