"""Reading a request body: a bounded size, JSON, a pydantic model; every failure an ApiError with a reason."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

MAX_TEXT = 32_000


class ApiError(Exception):
    def __init__(self, status: int, reason: str, **extra: Any):
        self.status, self.reason, self.extra = status, reason, extra


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
    if isinstance(raw.get("text"), str) and len(raw["text"]) > MAX_TEXT:
        raise ApiError(413, f"text is {len(raw['text'])} characters; the limit is {MAX_TEXT}")
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


def reasons(errors: Any) -> list[dict[str, Any]]:
    out = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        out.append({"field": ".".join(loc), "reason": err.get("msg", "invalid")})
    return out
