"""A TCP proxy for fault tests that can stall: it keeps accepting bytes and forwards none, both ways.

    proxy = await StallingProxy(upstream_port).start()   # proxy.port: where clients connect instead
    proxy.stall()      # bytes are accepted (the kernel and this proxy acknowledge them), none forwarded
    proxy.resume()     # what was held goes on, in order, as when a network path comes back
    await proxy.close()

That is what a stalled middlebox, pooler or half-dead network path looks like to a client: its sends
succeed, no answer comes, and TCP keepalives are answered by the proxy's own socket. A client that
gives up and closes its side while stalled does not take back what it sent: that is still delivered
when the proxy resumes, then the upstream side is closed (what TCP does with data already sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self


class StallingProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1"):
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.held = 0  # chunks waiting for resume right now

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.resume()
        if self._server is not None:
            self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        for pump in list(self._pumps):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await pump
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(src, dst))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                if not self._flowing.is_set():
                    self.held += 1
                    try:
                        await self._flowing.wait()  # (not reading on: the kernel buffers the rest)
                    finally:
                        self.held -= 1
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.close()
