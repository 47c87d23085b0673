"""A webhook receiver on 127.0.0.1 that checks each delivery's Standard Webhooks signature and keeps
what it accepted, for the tests that count deliveries."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from aiohttp import web

from agentd.channels.webhook_delivery import sign


class Receiver:
    def __init__(self, secret: str):
        self.secret = secret
        self.accepted: list[dict[str, Any]] = []
        self.ids: Counter[str] = Counter()  # webhook-id -> how many times it arrived
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        delivery_id = request.headers["webhook-id"]
        timestamp = int(request.headers["webhook-timestamp"])
        if request.headers["webhook-signature"] != sign(self.secret, delivery_id, timestamp, body):
            return web.Response(status=401, text="bad signature")
        self.ids[delivery_id] += 1
        self.accepted.append(json.loads(body))
        return web.Response(status=204)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.ids.values())
