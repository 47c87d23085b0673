"""Slack's Events API callback, checked before anything reads it: verify, then parse.

Slack signs every request: `X-Slack-Signature` is "v0=" + the hex HMAC-SHA256
of "v0:<X-Slack-Request-Timestamp>:<raw body>" under the app's signing secret,
and a timestamp more than five minutes away is refused as a possible replay.
Only a request that passes is parsed, and only a JSON object of a shape we
know is handed on. See https://api.slack.com/authentication/verifying-requests-from-slack
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from agentd.channels.callbacks import CallbackRefused, json_object

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
MAX_CLOCK_SKEW = 300  # seconds, as Slack's own SDKs allow


def verify_signature(
    secret: str, body: bytes, timestamp: str | None, signature: str | None, now: float
) -> None:
    """Raise CallbackRefused (401, with the reason) unless Slack signed this body at about `now`."""
    if not timestamp or not signature:
        raise CallbackRefused(401, f"not signed: {TIMESTAMP_HEADER} and {SIGNATURE_HEADER} are required")
    if not timestamp.isascii() or not timestamp.isdigit():
        raise CallbackRefused(401, f"{TIMESTAMP_HEADER} is not a whole number of seconds")
    if abs(now - int(timestamp)) > MAX_CLOCK_SKEW:
        raise CallbackRefused(401, f"{TIMESTAMP_HEADER} is more than {MAX_CLOCK_SKEW} s from now (a replay?)")
    signed = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise CallbackRefused(401, "signature does not match the signing secret")


def parse_payload(body: bytes) -> dict[str, Any]:
    """A verified body as an Events API payload; CallbackRefused (400) when it is not one."""
    payload = json_object(body)
    kind = payload.get("type")
    if not isinstance(kind, str):
        raise CallbackRefused(400, "payload has no string `type`")
    if kind == "url_verification" and not isinstance(payload.get("challenge"), str):
        raise CallbackRefused(400, "url_verification without a string `challenge`")
    if kind == "event_callback":
        event = payload.get("event")
        if not isinstance(event, dict):
            raise CallbackRefused(400, "event_callback whose `event` is not an object")
        if not isinstance(event.get("type"), str):
            raise CallbackRefused(400, "event_callback whose event has no string `type`")
    return payload
