"""What a Telegram update becomes: its route (telegram_routing), with its files (telegram_files), held
back while it is one part of an album (telegram_albums)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from telegram import Update
from telegram.ext import ExtBot

from agentd.channels.chat import Route
from agentd.channels.telegram_albums import Albums
from agentd.channels.telegram_files import Redact, attachments_of
from agentd.channels.telegram_routing import Bot, TelegramTarget, route_update
from agentd.config.telegram import TelegramSpec


class Intake:
    """One bot's matching of updates; an album is handled (`handle`, in a task `track` runs) once it is
    complete."""

    def __init__(
        self,
        handle: Callable[[Route[Any]], Awaitable[None]],
        track: Callable[[Coroutine[Any, Any, None]], object],
        stopping: asyncio.Event,
    ) -> None:
        self.albums = Albums(handle, track, stopping)

    def match(
        self, update: Update, bot: Bot, api: ExtBot[Any], redact: Redact, spec: TelegramSpec
    ) -> Route[TelegramTarget] | None:
        """The route to answer now, or None: not for this bot, or a part of an album answered when it
        is complete. No I/O: the files are fetched only when the engine asks."""
        message = update.message
        files = attachments_of(message, api, redact) if message is not None else ()
        route = functools.partial(route_update, update, bot=bot, per_user=spec.per_user, files=files)
        return self.albums.hold(message, route(respond_to=spec.respond_to), lambda: route(respond_to="all"))
