"""What every platform callback shares: a bounded read, JSON parsing, and refusals that say why.

A callback (Slack's Events API, Telegram's webhook) is reachable by anyone who
can reach the daemon, so the order is fixed: read at most `MAX_BODY` bytes,
check the platform's proof, and only then parse. Whatever is wrong with a
request becomes a `CallbackRefused` and a 4xx with `{"error": reason}`, never
a 500 or a traceback in the log.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # Slack events and Telegram updates are a few KB; a megabyte is never one of them


class CallbackRefused(Exception):
    """A platform callback that is not answered: its HTTP status and the reason, for the caller."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self, channel: str) -> JSONResponse:
        # Refusals are what strangers on the network cause: one line at INFO, no traceback.
        log.info("%s callback refused with %d: %s", channel, self.status, self.reason)
        return JSONResponse({"error": self.reason}, status_code=self.status)


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, refused with 413 past `limit` bytes (declared or actually sent)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise CallbackRefused(413, f"request body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise CallbackRefused(413, f"request body is over the limit of {limit} bytes")
    return bytes(body)


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (UTF-8, as both platforms send), refused with 400 otherwise."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise CallbackRefused(400, "request body is not UTF-8 text") from None
    except ValueError as exc:
        raise CallbackRefused(400, f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CallbackRefused(400, f"request body is JSON but not an object (a {type(data).__name__})")
    return data
