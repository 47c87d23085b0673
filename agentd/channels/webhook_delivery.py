"""The webhook's signed deliveries: a scheduled job made over the webhook has no request left to answer,
so its message is POSTed to `channels.webhook.deliver_url` and signed, the Standard Webhooks 1.0 way
(https://www.standardwebhooks.com), so that any of its libraries verifies it:

    webhook-id: <the delivery's id, the same on every retry: the receiver's key to drop a duplicate>
    webhook-timestamp: <Unix seconds when this attempt was signed>
    webhook-signature: v1,<base64 of HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>

The key is `signing_secret`'s UTF-8 bytes; a secret written `whsec_<base64>` (the form Standard Webhooks
libraries generate) is that base64 decoded. A receiver refuses a timestamp more than 5 minutes from its
clock (replay) and compares the signature in constant time; README "Scheduled jobs and reminders".

`send_signed` returns once the receiver answered 2xx (its acknowledgement, which the outbox records as
sent) and raises `DeliveryFailed` for anything else — another status, a timeout, no connection — so the
outbox keeps the delivery and retries it with backoff (`retryable` False: a 4xx that the same request
will get again; the outbox may stop sooner). Redirects are not followed: a 3xx is a failure.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from agentd.errors import RuntimeFault

SECRET_PREFIX = "whsec_"
# statuses that a later attempt of the same request may get past
_RETRYABLE = {408, 409, 425, 429}
_TIMEOUT_S = 10.0


class DeliveryFailed(RuntimeFault):
    """The receiver did not acknowledge a delivery: `status` (None: no answer), whether a retry may
    succeed, and the seconds its `Retry-After` asked for."""

    def __init__(
        self, message: str, *, status: int | None, retryable: bool, retry_after: float | None = None
    ):
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(message)


@dataclass(frozen=True)
class Acknowledged:
    """What the receiver answered to a delivery it accepted."""

    status: int
    delivery_id: str


def signing_key(secret: str) -> bytes:
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except ValueError:
            pass  # not base64 after all: the whole text is the key
    return secret.encode("utf-8")


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: `v1,<base64 HMAC-SHA256>` of `<id>.<timestamp>.<body>`."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return f"v1,{base64.b64encode(digest).decode('ascii')}"


def encode_body(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes sent and signed (compact JSON, UTF-8)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def job_message(
    *, agent: str, job_id: str, conversation: str, text: str, fired_at: float, kind: str
) -> dict[str, Any]:
    """The body of a job's delivery, in the Standard Webhooks envelope (type, timestamp, data)."""
    return {
        "type": "job.delivery",
        "timestamp": datetime.fromtimestamp(fired_at, UTC).isoformat().replace("+00:00", "Z"),
        "data": {"agent": agent, "job_id": job_id, "conversation": conversation, "kind": kind, "text": text},
    }


def question_message(*, agent: str, question: Mapping[str, Any], text: str, now: float) -> dict[str, Any]:
    """The body of a tool server's question to a webhook conversation (README "MCP servers"): what it
    asks, its form's fields or URL, when it expires, and where to answer it."""
    expires_at = float(question["expires_at"])
    return {
        "type": "elicitation.requested",
        "timestamp": _iso(now),
        "data": {
            "agent": agent,
            "conversation": question["conversation_key"],
            **{k: question[k] for k in ("id", "user_id", "server", "mode", "message", "fields", "required")},
            "url": question["url"],
            "expires_at": _iso(expires_at),
            "text": text,
            "answer": f"POST /agents/{agent}/questions/{question['id']}",
        },
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


async def send_signed(
    client: httpx.AsyncClient,
    url: str,
    secret: str,
    *,
    delivery_id: str,
    payload: Mapping[str, Any],
    now: float,
    timeout_s: float = _TIMEOUT_S,
) -> Acknowledged:
    """POST `payload` to `url`, signed under `secret` at `now` (epoch seconds, from the daemon's Clock);
    the receiver's 2xx, or `DeliveryFailed`."""
    body = encode_body(payload)
    timestamp = int(now)
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, delivery_id, timestamp, body),
    }
    try:
        response = await client.post(
            url, content=body, headers=headers, timeout=timeout_s, follow_redirects=False
        )
    except httpx.TimeoutException:
        raise DeliveryFailed(
            f"{url} did not answer within {timeout_s:g}s", status=None, retryable=True
        ) from None
    except httpx.HTTPError as e:
        raise DeliveryFailed(f"{url} could not be reached: {e!r}", status=None, retryable=True) from None
    status = response.status_code
    if 200 <= status < 300:
        return Acknowledged(status, delivery_id)
    retryable = status >= 500 or status in _RETRYABLE
    raise DeliveryFailed(
        f"{url} answered HTTP {status}" + (" (a redirect is not followed)" if 300 <= status < 400 else ""),
        status=status,
        retryable=retryable,
        retry_after=_retry_after(response.headers.get("retry-after"), now),
    )


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds in a `Retry-After` header (a number, or an HTTP date measured from `now`)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    return max(0.0, seconds) if math.isfinite(seconds) else None
