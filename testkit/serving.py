"""Serving an ASGI app on 127.0.0.1 inside a test's loop, the way the daemon serves its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import uvicorn

from testkit.waiting import wait_until


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the test process, like the daemon, owns its signals


@contextlib.asynccontextmanager
async def serve_on_loopback(
    app: Any, lifespan: Literal["on", "off"] = "off", port: int = 0
) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free loopback port (or `port`: a server restarted where it was)
    until the block ends; yields its base URL (`lifespan="on"` for an app that starts things in its
    lifespan, as an MCP server does)."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only for a socket whose
    # protocol says TCP, and without it every small answer waited ~40 ms for a delayed ACK (the
    # daemon's own socket had the same fix, agentd/daemon/server.py)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    server = _Server(
        uvicorn.Config(
            # a client still connected at the end (an MCP client's open stream) is cut after 2 s
            app,
            lifespan=lifespan,
            ws="none",
            log_level="warning",
            timeout_graceful_shutdown=2,
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await wait_until(lambda: server.started or serving.done(), "uvicorn to start")
        if serving.done():
            serving.result()  # raises what stopped it
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 5.0)
        sock.close()
