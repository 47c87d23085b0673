"""Socket Mode clients whose reconnection is ours, not the SDK's.

The SDK's SocketModeClient can reconnect by itself, but it retries at a fixed
ping interval forever, reuses a URL that may have expired, keeps going on a
revoked token, and tells nobody. Here every reconnect the SDK asks for only
closes the socket and wakes the channel, which supervises: apps.connections.open
-> connect -> watch -> backoff -> again, reporting its status to the host.
"""

from __future__ import annotations

import asyncio
from typing import Any

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.socket_mode.aiohttp import SocketModeClient


class SupervisedSocketModeClient(SocketModeClient):
    """The SDK client, except that a reconnect it asks for only closes the socket (we reconnect)."""

    def __init__(self, *, dropped: asyncio.Event, **kwargs: Any):
        super().__init__(**kwargs)
        self.dropped = dropped
        self.refresh_requested = False

    async def connect_to_new_endpoint(self, force: bool = False) -> None:
        # Reached when Slack sends {"type": "disconnect"} (e.g. refresh_requested):
        # the supervisor reconnects at once, without backoff.
        self.refresh_requested = True
        await self.disconnect()
        self.dropped.set()


class SupervisedSocketModeHandler(AsyncSocketModeHandler):
    """bolt's AsyncSocketModeHandler over `SupervisedSocketModeClient`."""

    client: SupervisedSocketModeClient

    def __init__(self, app: AsyncApp, app_token: str, ping_interval: float, dropped: asyncio.Event):
        # Not calling super().__init__: it would build a second client (an aiohttp session and a task).
        self.app = app
        self.app_token = app_token
        self.client = SupervisedSocketModeClient(
            dropped=dropped,
            app_token=app_token,
            logger=app.logger,
            web_client=app.client,
            ping_interval=ping_interval,
            auto_reconnect_enabled=False,
        )
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]
