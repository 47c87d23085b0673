"""What of a tool call's arguments the audit trail keeps: none, redacted (the default) or full.

Redacted replaces the values of keys that look like secrets (token, password,
key, secret, authorization, ...) and any value over 200 characters, at any
depth. A tool's private arguments (memory values) are left out whatever the
mode; its plain arguments are ones its own code knows are no secret whatever
their name says (a memory's `key` names the fact, and is what a person
approving `remember` must see), so their names are not matched, though the
size cap still applies. A tool's result is never written to the audit trail
at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

MAX_VALUE_CHARS = 200
SECRET_KEY_RE = re.compile(
    r"token|passw|passphrase|secret|key|authori[sz]ation|credential|cookie|signature|bearer|private",
    re.IGNORECASE,
)
REDACTED = "[redacted]"


def audit_args(
    args: dict[str, Any], mode: str, private: Collection[str] = (), plain: Collection[str] = ()
) -> dict[str, Any] | None:
    """The arguments as the audit trail keeps them (None: `none`, nothing is kept)."""
    if mode == "none":
        return None
    kept = {k: v for k, v in args.items() if k not in private}
    if mode == "full":
        return kept
    return {k: _redacted("" if k in plain else k, v) for k, v in kept.items()}


def _redacted(key: str, value: Any) -> Any:
    if SECRET_KEY_RE.search(key):
        return REDACTED
    if isinstance(value, dict):
        return {str(k): _redacted(str(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted("", v) for v in value]
    size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
    if size > MAX_VALUE_CHARS:
        return f"[redacted: {size} characters]"
    return value


def describe_args(args: dict[str, Any] | None, limit: int = 400) -> str:
    """Arguments as one short line for a person (the approval request), already redacted by the caller."""
    if not args:
        return "{}"
    text = json.dumps(args, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
