"""An MCP server's own log messages (`notifications/message`): into agentd's log, the last ones kept.

A server's messages go through agentd's logging at their own severity (the
spec's syslog levels mapped onto Python's), named by agent and server, so
`--log-format json` wraps them like any line of agentd's; the last few are kept
for `agentd tools` and `GET /agents`, beside a crashed server's stderr tail.

Which messages arrive is asked for once per connection at LOG_LEVEL: with
`logging/setLevel` on a 2025-era connection whose server offers logging, and on
a 2026 one by the per-request opt-in the SDK stamps (the Client's `log_level`).
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections import deque
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

log = logging.getLogger(__name__)
LOG_LEVEL: types.LoggingLevel = "info"
KEPT = 20
MAX_MESSAGE_CHARS = 2000
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


class ServerLog:
    def __init__(self, agent: str, server: str):
        self.agent = agent
        self.server = server
        self.recent: deque[dict[str, Any]] = deque(maxlen=KEPT)

    async def ask_for_messages(self, client: Client) -> None:
        """On a 2025-era connection whose server offers logging, ask for LOG_LEVEL and above (a 2026
        one is asked per request). A server that refuses still serves its tools."""
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS or not client.server_capabilities.logging:
            return
        try:
            with warnings.catch_warnings():  # deprecated in 2026-07-28, and what 2025 servers read
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level(LOG_LEVEL)
        except MCPError as e:
            log.warning("agent %s: MCP server %s refused logging/setLevel: %s", self.agent, self.server, e)

    async def received(self, params: types.LoggingMessageNotificationParams) -> None:
        """The SDK's logging callback: one `notifications/message`."""
        data = params.data
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
        text = text[:MAX_MESSAGE_CHARS]
        self.recent.append(
            {"at": time.time(), "level": params.level, "logger": params.logger, "message": text}
        )
        log.log(
            LEVELS.get(params.level, logging.INFO),
            "agent %s: MCP server %s%s: %s",
            self.agent,
            self.server,
            f" ({params.logger})" if params.logger else "",
            text,
        )
