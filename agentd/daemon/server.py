"""The HTTP server inside the daemon's loop: uvicorn on a socket the daemon bound itself.

Binding first, before anything else starts, means a busy port is a clear
error before any agent loads, and the server is ready the moment it starts:
connections wait in the socket's backlog until uvicorn accepts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Iterator

import uvicorn

from agentd.errors import OperatorError


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed, else None (asyncio's own). uvicorn picks httptools over
    h11 by itself when it is installed; the loop is the daemon's, so the daemon picks it: measured on
    bench/http_load.py (bench/README.md), the two together make a webhook turn cheaper."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns shutdown order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def url(host: str, port: int) -> str:
    """http://host:port, with an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or an OperatorError saying what to do."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OperatorError(
            f"cannot listen on {host}: {e.strerror}; set http.host in agentd.yaml or --host"
        ) from None
    family, kind, proto, _, address = infos[0]
    # With proto IPPROTO_TCP (not 0), asyncio sets TCP_NODELAY on every accepted connection: without
    # it a response written in two pieces waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise OperatorError(
                f"port {port} on {host} is already in use (another agentd, or another program): "
                "pick another with --port or http.port in agentd.yaml"
            ) from None
        raise OperatorError(f"cannot listen on {url(host, port)}: {e.strerror or e}") from None
    sock.setblocking(False)
    return sock
