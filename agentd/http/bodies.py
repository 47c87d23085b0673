"""What the API reads and writes: request bodies read by hand (size first, then JSON, then fields),
and the forms of its values (times, conversation keys, user ids)."""

from __future__ import annotations

import contextlib
import json
import math
import re
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Path, Request
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentd.events import CONVERSATION_ID_RE, USER_ID_FORM, USER_ID_PATTERN, Reply, is_user_id
from agentd.http.errors import ApiError, reasons
from agentd.http.idempotency import KEY_DOC, KEY_PATTERN
from agentd.http.media_in import MAX_FILES, AttachmentIn

MAX_TEXT = 32_000
UPLOADED = "uploaded"  # validation context: how many files came beside the fields (multipart)
AGENT_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
# A time: epoch seconds, or an RFC 3339 date-time (`T` or a space; an offset, else UTC).
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})?$", re.ASCII
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
# The times a datetime can show (years 1 to 9999, UTC): a time is stored and later printed (a recalled
# episode's date), so one outside them would fail every later turn that recalls it, not this request.
EARLIEST_S = -62135596800.0  # 0001-01-01T00:00:00Z
LATEST_S = 253402300799.0  # 9999-12-31T23:59:59Z
TIME_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": EARLIEST_S, "maximum": LATEST_S},
        {"type": "string", "format": "date-time"},
    ],
    "description": "epoch seconds, or an ISO-8601 / RFC 3339 date-time (UTC when it has no offset); "
    "years 1 to 9999",
}


class MessageIn(BaseModel):
    # what `_says_something` requires, for clients and validators: some text, or a file
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["text"], "properties": {"text": {"minLength": 1}}},
                {"required": ["attachments"], "properties": {"attachments": {"minItems": 1}}},
            ]
        },
    )

    conversation_id: str = Field(pattern=CONVERSATION_ID_RE.pattern, description="1-128 of [A-Za-z0-9_.:-]")
    text: str = Field(default="", max_length=MAX_TEXT, description="may be empty when files come with it")
    attachments: list[AttachmentIn] = Field(
        default=[], max_length=MAX_FILES, description="files with the message (or send multipart/form-data)"
    )
    user_id: str | None = Field(
        default=None,
        json_schema_extra={"pattern": USER_ID_PATTERN},
        description=f"who is speaking: {USER_ID_FORM} (the id the people routes take)",
    )
    message_id: str | None = Field(
        default=None, pattern=KEY_PATTERN, description=f"the Idempotency-Key: {KEY_DOC}"
    )
    sent_at: float | None = Field(
        default=None,
        json_schema_extra={
            "anyOf": [*TIME_SCHEMA["anyOf"], {"type": "null"}],
            "description": f"when the person sent the message: {TIME_SCHEMA['description']}; "
            "episodic memories of it carry this time",
        },
    )

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str | None) -> str | None:
        if value is not None and not is_user_id(value):
            raise ValueError(f"not a user id ({USER_ID_FORM})")
        return value

    @field_validator("sent_at", mode="before")
    @classmethod
    def _sent_at(cls, value: Any) -> float | None:
        return None if value is None else epoch_seconds(value)

    @model_validator(mode="after")
    def _says_something(self, info: ValidationInfo) -> MessageIn:
        uploaded = isinstance(info.context, dict) and info.context.get(UPLOADED)  # multipart files
        if not self.text and not self.attachments and not uploaded:
            raise ValueError("a message needs text or attachments")
        return self


class ReplIn(BaseModel):
    """A line of `agentd chat` sent to the daemon that owns the data folder (conversation repl:<session>)."""

    model_config = ConfigDict(extra="forbid")

    session: str = Field(pattern=CONVERSATION_ID_RE.pattern, description="1-128 of [A-Za-z0-9_.:-]")
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    attachments: list[AttachmentIn] = Field(default=[], max_length=MAX_FILES, description="/attach's files")


class FileOut(BaseModel):
    """A file the reply carries (one a tool made), readable at `url` with the same token."""

    sha256: str
    mime_type: str
    filename: str
    size: int
    url: str = Field(description="GET /agents/{agent}/media/{sha256}")


class MessageOut(BaseModel):
    reply: str
    run_id: str | None
    conversation_key: str
    error: str | None = None
    approval: str | None = Field(
        default=None, description="the id of a tool call waiting for approval (the reply says which)"
    )
    files: list[FileOut] = Field(
        default=[], description="the files the run's tools returned (media.send_tool_files)"
    )


def media_url(agent: str, sha256: str) -> str:
    return f"/agents/{agent}/media/{sha256}"


def documented_pattern(pattern: str, description: str) -> dict[str, Any]:
    """A parameter's pattern for the OpenAPI, checked by the route itself (so a bad value gets the
    route's own 400 or 404 with a reason, rather than a bare pattern mismatch)."""
    return {"json_schema_extra": {"pattern": pattern}, "description": description}


def agent_param() -> Any:
    """The `{agent}` path parameter (an unknown name is a 404 with the reason, whatever its form)."""
    return Path(**documented_pattern(AGENT_PATTERN, "the agent's name (its file name)"))


def reply_out(reply: Reply, agent: str) -> MessageOut:
    return MessageOut(
        reply=reply.text,
        run_id=reply.run_id,
        conversation_key=reply.conversation_key,
        error=reply.error,
        approval=reply.approval,
        files=[
            FileOut(
                sha256=f.sha256,
                mime_type=f.mime_type,
                filename=f.filename,
                size=len(f.data),
                url=media_url(agent, f.sha256),
            )
            for f in reply.files
            if f.sha256 is not None
        ],
    )


def body_schema(model: type[BaseModel], stream: dict[str, Any] | None = None) -> dict[str, Any]:
    """`openapi_extra` for a route that reads `model` from its body by hand (read_json); with `stream`,
    the schema of each Server-Sent Event a `stream: true` call answers with."""
    extra: dict[str, Any] = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inlined(model.model_json_schema())}},
        }
    }
    if stream is not None:
        extra["responses"] = {"200": {"content": {"text/event-stream": {"schema": stream}}}}
    return extra


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its `$defs` put in place: a `#/$defs/...` reference means nothing
    inside an OpenAPI document, whose root is not the schema's."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


def sse_event_schema(events: list[str] | None) -> dict[str, Any]:
    """The schema of a Server-Sent Events body, for both ways validators read one. A generic one
    (openapi-core) applies a response's schema to the whole body, which is text; schemathesis, as
    OpenAPI 3.1 leaves streams to tools, applies it to each event, an object of its `event` name (one
    of `events`; None: events carry only `data`) and its `data` line. An object schema alone refused
    every real stream in the first; a string schema alone every event in the second."""
    properties: dict[str, Any] = {"data": {"type": "string"}}
    if events is not None:
        properties["event"] = {"type": "string", "enum": events}
    names = f"events named {', '.join(events)}" if events is not None else "unnamed events"
    return {
        "description": f"Server-Sent Events (text/event-stream): {names}, each with a `data:` line",
        "anyOf": [
            {"type": "string", "description": "the whole stream, as text"},
            {
                "type": "object",
                "description": "one event",
                "properties": properties,
                "required": ["data"],
            },
        ],
    }


M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request, model: type[M], limit: int) -> M:
    """The body as `model`: 413 too large, 400 not a JSON object, 422 a field that fails validation."""
    body = await read_body(request, limit)
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"malformed JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ApiError(400, f"expected a JSON object {{{', '.join(model.model_fields)}}}")
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ApiError(422, "invalid request", detail=reasons(e.errors())) from None


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def epoch_seconds(value: float | str, *, numeric_text: bool = False) -> float:
    """A time as epoch seconds: a number, or an RFC 3339 date-time (no offset: UTC; `T` or a space; a
    leap second and any number of fraction digits allowed); with `numeric_text`, also a number written
    as text (a query parameter) or a day alone. ValueError otherwise."""
    if isinstance(value, str):
        seconds = _text_time(value, numeric_text)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValueError(f"expected a number or a date-time, got {type(value).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite time, got {value!r}")
    if not EARLIEST_S <= seconds <= LATEST_S:
        raise ValueError(f"expected a time between the years 1 and 9999 (UTC), got {value!r}")
    return seconds


def _text_time(text: str, numeric_text: bool) -> float:
    if numeric_text:
        with contextlib.suppress(ValueError):
            return float(text)
        if _DATE.match(text):
            text += "T00:00:00"  # a day alone: its start, UTC
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"expected an ISO-8601 date-time or epoch seconds, got {text!r}")
    day, minutes, seconds, fraction, offset = match.groups()
    # RFC 3339 allows a leap second (:60) and any number of fraction digits; Python's parser neither.
    normalized = f"{day}T{minutes}:{min(int(seconds), 59):02d}"
    if fraction:
        normalized += "." + fraction[:6].ljust(6, "0")
    offset = "+00:00" if offset in (None, "Z", "z") else offset
    # a date-time's own fields are years 1-9999 (the parser allows no other), but its offset may carry
    # it up to a day past them in UTC: the nearest bound, so every date-time the document allows is taken
    # (a number, which the document bounds, is refused past them instead)
    return min(max(datetime.fromisoformat(normalized + offset).timestamp(), EARLIEST_S), LATEST_S)


def parse_since(value: str | None) -> float | None:
    """The `since` query parameter: 400 when it is no time."""
    if value is None or value == "":
        return None
    try:
        return epoch_seconds(value, numeric_text=True)
    except ValueError as e:
        raise ApiError(400, f"since: {e}") from None


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
