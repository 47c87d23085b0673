"""The names MCP tools reach the model by: `<server>__<tool>`, valid under OpenAI's and Anthropic's
rules (^[a-zA-Z0-9_-]{1,64}$).

A tool name that does not fit as it is (other characters, or too long) keeps
a readable prefix and ends with a digest of the original name, so the name is
stable across restarts and two tools never share one.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def model_tool_name(server: str, tool: str) -> str:
    """The name the model calls `tool` of `server` by."""
    name = f"{server}{SEPARATOR}{tool}"
    if VALID_NAME.match(name):
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    readable = _UNSAFE.sub("_", tool)
    room = MAX_NAME - len(server) - len(SEPARATOR) - len(digest) - 1
    return f"{server}{SEPARATOR}{readable[: max(room, 0)]}_{digest}"
