"""The channel seam: `run(host)` until stopped, `send` a reply; HTTP-mode channels also `handle_http`."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from agentd.events import ChannelHost


@runtime_checkable
class Channel(Protocol):
    """One platform connection of one agent.

    `run` connects, turns platform messages into InboundEvents for
    `host.dispatch`, sends each reply, reconnects with backoff on a lost
    connection, and returns only when `stop` was called (or raises after
    reporting `host.set_status(name, "failed", why)` for a refusal such as a
    bad token). It must never raise for a single bad message.

    Chat platforms build on `agentd.channels.chat.ChatChannel`, which does
    everything but connecting, matching an event and sending one chunk.
    """

    name: str
    # True when the platform allows one connection per bot (Discord's gateway, Telegram polling, Slack
    # Socket Mode): with several daemons on one store, only the one holding the channel's lease runs it.
    exclusive: bool

    async def run(self, host: ChannelHost) -> None: ...

    async def stop(self) -> None:
        """Stop taking messages and close every client; returns within a few seconds."""
        ...


@runtime_checkable
class HttpChannel(Protocol):
    """A channel that also receives platform calls on the daemon's own HTTP server.

    `http_path` is mounted as POST on the daemon's app (e.g. "/slack/<agent>/events");
    `handle_http` gets the starlette Request and returns a starlette Response.
    """

    http_path: str

    async def handle_http(self, request: Any) -> Any: ...
