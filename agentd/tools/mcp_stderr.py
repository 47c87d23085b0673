"""A stdio MCP server's stderr: read from a pipe of ours, logged line by line, its tail kept.

Left to itself the SDK hands the server our own stderr, so whatever the server
prints lands raw in agentd's log stream (`--log-format json` then is not JSON,
and `jq` stops there) and says nothing about which server printed it. Here each
line goes through agentd's logging (named by agent and server, so the JSON
format wraps it), and the last lines are kept: a server that crashes usually
says why on stderr, and that tail is what `agentd tools` and `GET /agents`
show beside "Connection closed".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from typing import IO, Any

log = logging.getLogger(__name__)
TAIL_LINES = 20
MAX_LINE_CHARS = 2000
DRAIN_S = 1.0  # after the server's end, how long its last lines may take (a child may hold the pipe)


class ServerStderr:
    def __init__(self, agent: str, server: str):
        self.agent = agent
        self.server = server
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.process: Any = None  # the last run's process (its returncode once it ended), when known

    def returncode(self) -> int | None:
        """The last run's exit status (negative: the signal that killed it); None while it runs or
        when unknown."""
        code = getattr(self.process, "returncode", None)
        return code if isinstance(code, int) else None

    def ended(self) -> str:
        """How the last run ended, in words ('' while it runs or when unknown)."""
        code = self.returncode()
        if code is None:
            return ""
        return f"it was killed by signal {-code}" if code < 0 else f"it exited with status {code}"

    def last(self, lines: int = 3) -> str:
        """The last few lines, as one line for an error message ('' when it printed nothing)."""
        return " | ".join(list(self.tail)[-lines:])

    @contextlib.asynccontextmanager
    async def capture(self) -> AsyncIterator[IO[bytes]]:
        """A pipe for one spawn: yields its write end (the server's stderr; close it once the server
        runs, so the pipe ends with the server), and reads the other end until then."""
        self.tail.clear()  # what this run of the server says
        self.process = None
        read_fd, write_fd = os.pipe()
        reading = os.fdopen(read_fd, "rb", buffering=0)
        writing = os.fdopen(write_fd, "wb", buffering=0)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_LINE_CHARS * 4)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), reading)
        task = loop.create_task(self._read(reader))
        try:
            yield writing
        finally:
            writing.close()
            # our own task on our own pipe: a plain cancel is fine here (it is not the SDK's transport)
            _, pending = await asyncio.wait({task}, timeout=DRAIN_S)
            for left in pending:
                left.cancel()
            transport.close()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await reader.readline()
            except ValueError:  # a line past the reader's limit (asyncio drops it)
                raw = b"[a line too long to keep]"
            if not raw:
                return
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")[:MAX_LINE_CHARS]
            if line.strip():
                self.tail.append(line)
                log.info("agent %s: MCP server %s: %s", self.agent, self.server, line)
