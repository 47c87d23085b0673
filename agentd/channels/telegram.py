"""Telegram: python-telegram-bot v22 on its coroutine API, by long polling or the daemon's own webhook route.

Polling runs PTB's Updater (it retries lost connections; our error callback
turns its failures into a "reconnecting" status and the next good poll into
"running"). Webhook mode has no Updater and no tornado: the daemon mounts
`handle_http` at `http_path`, which checks the secret header and puts the
update on the Application's queue. Either way one MessageHandler turns a
message into an InboundEvent, the host runs it, and the reply goes back in
the same chat (and topic), split at 4096 characters, honouring flood limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hmac
import json
import logging
import re
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from telegram import BotCommand, Message, MessageEntity, Update
from telegram.constants import ChatAction, ChatType
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, MessageHandler, filters
from telegram.request import HTTPXRequest

from agentd.channels.common import backoff_delays, split_message
from agentd.config.telegram import TelegramSpec
from agentd.events import ChannelHost, InboundEvent

log = logging.getLogger(__name__)

CHANNEL = "telegram"
MESSAGE_LIMIT = 4096
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
DEFAULT_API = "https://api.telegram.org"
COMMANDS = (
    BotCommand("status", "Show model, memory and token use of this conversation"),
    BotCommand("compact", "Summarise older messages now"),
    BotCommand("new", "Start a fresh conversation (the old one stays in the log)"),
    BotCommand("reset", "Forget this conversation"),
    BotCommand("help", "List the commands"),
)
TYPING_EVERY = 4.5  # Telegram shows "typing…" for 5 s after each sendChatAction
NETWORK_RETRIES = 3  # a reply survives this many transient failures (timeouts, 5xx, dropped connections)
RATE_LIMIT_RETRIES = 5  # and this many 429s, each after its retry_after
STOP_SECONDS = 4.5  # stop() waits at most this long for run() to close everything (the daemon allows 5 s)

_COMMAND_RE = re.compile(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?")


@dataclass(frozen=True, slots=True)
class _Route:
    """Where a message came from, and so where its reply goes."""

    chat_id: int
    thread_id: int | None
    key: str


class TelegramChannel:
    """One agent's Telegram bot. Built by the registry as ``TelegramChannel(agent, spec)``."""

    name = CHANNEL
    # Set only in webhook mode, so `isinstance(channel, HttpChannel)` is true only then
    # and the daemon mounts a route only for bots that receive webhooks.
    http_path: str
    retry_base = 1.0  # first backoff delay in seconds (start-up retries, failed sends); tests lower it
    drain_seconds = 3.0  # stop() lets in-flight turns send their replies this long, then cancels them

    def __init__(self, agent: str, spec: TelegramSpec) -> None:
        self.agent = agent
        self.spec = spec
        if spec.mode == "webhook":
            self.http_path = f"/telegram/{agent}"
        self._host: ChannelHost | None = None
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._requests: list[HTTPXRequest] = []
        self._bot_id = 0
        self._bot_username = ""
        self._stop_requested = asyncio.Event()
        self._closed = asyncio.Event()
        self._started = False
        self._reconnecting = False
        self._failure: str | None = None
        self._inflight: set[asyncio.Task[Any]] = set()

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, host: ChannelHost) -> None:
        """Connect, serve until `stop()`, close. A refused token ends the run with status "failed"."""
        self._host = host
        self._started = True
        host.set_status(CHANNEL, "starting")
        app = self._app = self._build_application()
        try:
            if await self._connect(app):
                self._reconnecting = False
                host.set_status(CHANNEL, "running")
                await self._stop_requested.wait()
        except InvalidToken as exc:
            self._failure = (
                f"Telegram refused the bot token ({self._redact(exc)}); check channels.telegram.token"
            )
        except TelegramError as exc:
            self._failure = f"Telegram refused to start the bot: {self._redact(exc)}"
        finally:
            await self._close(app)
            if self._failure:
                log.error("telegram channel of agent %s failed: %s", self.agent, self._failure)
                host.set_status(CHANNEL, "failed", self._failure)
            else:
                host.set_status(CHANNEL, "stopped")
            self._closed.set()

    async def stop(self) -> None:
        self._stop_requested.set()
        if not self._started:
            return
        try:
            await asyncio.wait_for(self._closed.wait(), STOP_SECONDS)
        except TimeoutError:
            log.warning("telegram channel of agent %s did not close within %.0f s", self.agent, STOP_SECONDS)

    def _build_application(self) -> Application[Any, Any, Any, Any, Any, Any]:
        root = (self.spec.api_base_url or DEFAULT_API).rstrip("/")
        request = HTTPXRequest(connection_pool_size=32, read_timeout=10.0, write_timeout=10.0)
        poll_request = _PollingRequest(
            on_success=self._on_poll_success,
            on_token_refused=self._on_token_revoked,
            connection_pool_size=1,
        )
        self._requests = [request, poll_request]
        builder = (
            ApplicationBuilder()
            .token(self.spec.token)
            .base_url(f"{root}/bot")
            .base_file_url(f"{root}/file/bot")
            .request(request)
            .get_updates_request(poll_request)
            # the host orders events per conversation; PTB must not serialise every chat behind one turn
            .concurrent_updates(True)
            .job_queue(None)
        )
        if self.spec.mode == "webhook":
            builder = builder.updater(None)
        app = builder.build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE & filters.TEXT, self._on_message))
        app.add_error_handler(self._on_handler_error)
        return app

    async def _connect(self, app: Application[Any, Any, Any, Any, Any, Any]) -> bool:
        """Log in, register commands, start taking updates. False when stop() came first."""
        if not await self._retrying(app.initialize, "getMe"):
            return False
        self._bot_id = app.bot.id
        self._bot_username = app.bot.username
        await self._register_commands(app)
        await app.start()
        if self.spec.mode == "polling":
            assert app.updater is not None
            updater = app.updater

            async def start_polling() -> None:
                await updater.start_polling(
                    timeout=dt.timedelta(seconds=self.spec.poll_timeout),
                    allowed_updates=["message"],
                    error_callback=self._on_poll_error,
                )

            return await self._retrying(start_polling, "deleteWebhook")

        async def set_webhook() -> None:
            await app.bot.set_webhook(
                url=str(self.spec.webhook_url),
                secret_token=self.spec.secret_token,
                allowed_updates=["message"],
            )

        return await self._retrying(set_webhook, "setWebhook")

    async def _retrying(self, call: Callable[[], Awaitable[Any]], what: str) -> bool:
        """Run a start-up call until it succeeds, backing off on network trouble.

        A refusal (bad token, bad request) propagates; False means stop() was called meanwhile.
        """
        delays = backoff_delays(self.retry_base, cap=60.0)
        while not self._stop_requested.is_set():
            try:
                await call()
                return True
            except RetryAfter as exc:
                wait = _retry_after_seconds(exc)
            except BadRequest:
                raise
            except (NetworkError, Conflict) as exc:
                wait = next(delays)
                self._report_reconnecting(f"{what}: {self._redact(exc)}")
            if await self._sleep_unless_stopped(wait):
                return False
        return False

    async def _register_commands(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        try:
            await app.bot.set_my_commands(COMMANDS)
        except InvalidToken:
            raise
        except TelegramError as exc:  # the menu is a convenience; the bot works without it
            log.warning("telegram: setMyCommands failed for agent %s: %s", self.agent, self._redact(exc))

    async def _close(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        # stop intake first, then let in-flight turns send their replies, then close the clients
        steps: list[Callable[[], Awaitable[Any]]] = []
        if app.updater is not None and app.updater.running:
            steps.append(app.updater.stop)
        steps.append(self._drain)
        if app.running:
            steps.append(app.stop)
        steps.append(app.shutdown)
        # app.shutdown() skips a bot whose initialize() failed half-way; close its HTTP clients anyway
        steps.extend(request.shutdown for request in self._requests)
        for step in steps:
            try:
                await step()
            except TelegramError as exc:
                # e.g. the updater re-raising the refusal that ended the run; already reported
                log.warning(
                    "telegram: while closing the channel of agent %s: %s", self.agent, self._redact(exc)
                )
            except Exception:
                log.exception("telegram: error while closing the channel of agent %s", self.agent)

    async def _drain(self) -> None:
        pending = {task for task in self._inflight if task is not asyncio.current_task()}
        if not pending:
            return
        _, still_running = await asyncio.wait(pending, timeout=self.drain_seconds)
        for task in still_running:
            task.cancel()
        if still_running:
            log.warning(
                "telegram: cancelled %d unfinished turn(s) of agent %s at stop",
                len(still_running),
                self.agent,
            )
            await asyncio.wait(still_running, timeout=1.0)

    async def _sleep_unless_stopped(self, seconds: float) -> bool:
        """Sleep, waking early on stop(); True if stop() was called."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), seconds)
        return self._stop_requested.is_set()

    # -- connection status ---------------------------------------------------------------------

    def _on_poll_error(self, exc: TelegramError) -> None:
        # PTB's polling loop retries after this returns (1 s, growing to 30 s); it must not raise.
        log.warning("telegram: polling failed for agent %s, retrying: %s", self.agent, self._redact(exc))
        self._report_reconnecting(self._redact(exc))

    def _on_poll_success(self) -> None:
        if self._reconnecting and not self._stop_requested.is_set():
            self._reconnecting = False
            if self._host is not None:
                self._host.set_status(CHANNEL, "running")

    def _on_token_revoked(self, status: int) -> None:
        # PTB's polling loop ends silently on InvalidToken; end the run with a reason instead. The stop
        # is deferred a moment so PTB's loop sees its own error first (stopping it in the same loop
        # iteration leaves that error unretrieved).
        if self._failure is None:
            self._failure = (
                f"Telegram refused the bot token while polling (HTTP {status}); check channels.telegram.token"
            )
            asyncio.get_running_loop().call_later(0.1, self._stop_requested.set)

    def _report_reconnecting(self, why: str) -> None:
        if not self._reconnecting:
            self._reconnecting = True
            if self._host is not None:
                self._host.set_status(CHANNEL, "reconnecting", why)

    def _redact(self, exc: BaseException | str) -> str:
        return str(exc).replace(self.spec.token, "<token>")

    # -- webhook mode ----------------------------------------------------------------------------

    async def handle_http(self, request: Request) -> Response:
        """POST /telegram/<agent>: verify the secret header, then queue the update for the handler."""
        if self.spec.mode != "webhook":
            return Response(status_code=404)
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, str(self.spec.secret_token).encode()):
            return Response(status_code=403)
        app = self._app
        if app is None or not app.running or self._stop_requested.is_set():
            return Response(status_code=503)  # Telegram delivers it again later
        try:
            data = json.loads(await request.body())
            update = Update.de_json(data, app.bot) if isinstance(data, dict) else None
        except (ValueError, TypeError, KeyError):
            update = None
        if update is None:
            return Response(status_code=400)
        await app.update_queue.put(update)
        return Response(status_code=200)

    # -- one message -----------------------------------------------------------------------------

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        host = self._host
        if message is None or message.text is None or message.from_user is None or host is None:
            return
        text = self._addressed_text(message)
        if text is None:
            return
        route = self._route(message)
        denied = self._denied_because(message)
        if denied:
            await host.audit(
                "permission",
                "denied",
                conversation_key=route.key,
                data={
                    "channel": CHANNEL,
                    "user_id": str(message.from_user.id),
                    "chat_id": str(message.chat.id),
                    "reason": denied,
                },
            )
            return
        event = InboundEvent(
            agent=self.agent,
            conversation_key=route.key,
            text=text,
            channel=CHANNEL,
            user_id=str(message.from_user.id),
            event_id=f"{message.chat.id}:{message.message_id}",
            metadata={"chat_id": message.chat.id, "message_id": message.message_id, "topic": route.thread_id},
        )
        this_turn = asyncio.current_task()
        if this_turn is not None:
            self._inflight.add(this_turn)
        # dispatch before any other await, so events of one chat reach the host in arrival order
        typing = asyncio.create_task(self._keep_typing(route))
        try:
            reply = await host.dispatch(event)
        finally:
            typing.cancel()
            if this_turn is not None:
                self._inflight.discard(this_turn)
        if reply.duplicate or not reply.text.strip():
            return
        await self._send_reply(route, reply.text)

    def _addressed_text(self, message: Message) -> str | None:
        """The text meant for this bot, mention and @botname stripped; None if the message is not for us."""
        text = message.text or ""
        command = _COMMAND_RE.match(text) if _starts_with_command(message) else None
        if command and command.group(2) and command.group(2).lower() != self._bot_username.lower():
            return None  # /cmd@otherbot
        in_group = message.chat.type != ChatType.PRIVATE
        if in_group and self.spec.respond_to == "mentions":
            if not (command or self._mentions_bot(message) or self._replies_to_bot(message)):
                return None
        cleaned = self._strip_bot_name(text)
        return cleaned or None

    def _mentions_bot(self, message: Message) -> bool:
        me = "@" + self._bot_username.lower()
        for entity, value in message.parse_entities(
            [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
        ).items():
            if entity.type == MessageEntity.MENTION and value.lower() == me:
                return True
            if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == self._bot_id:
                return True
        return False

    def _replies_to_bot(self, message: Message) -> bool:
        original = message.reply_to_message
        if original is None or original.from_user is None:
            return False
        if original.forum_topic_created is not None:
            return False  # in a forum topic every message "replies" to the topic's first message
        return original.from_user.id == self._bot_id

    def _strip_bot_name(self, text: str) -> str:
        name = re.escape(self._bot_username)
        text = re.sub(rf"^(/[A-Za-z0-9_]+)@{name}\b", r"\1", text, flags=re.IGNORECASE)
        text = re.sub(rf"(?:^|(?<=\s))@{name}\b[,:]?[ \t]*", "", text, flags=re.IGNORECASE)
        return text.strip()

    def _route(self, message: Message) -> _Route:
        chat_id = message.chat.id
        thread_id = message.message_thread_id if message.is_topic_message else None
        key = f"{CHANNEL}:{chat_id}"
        if thread_id is not None:
            key += f":topic:{thread_id}"
        if self.spec.per_user and message.chat.type != ChatType.PRIVATE and message.from_user is not None:
            key += f":user:{message.from_user.id}"  # private chats are per person already
        return _Route(chat_id=chat_id, thread_id=thread_id, key=key)

    def _denied_because(self, message: Message) -> str | None:
        user_id = str(message.from_user.id) if message.from_user else ""
        if self.spec.allowed_users and user_id not in self.spec.allowed_users:
            return "user not in allowed_users"
        if self.spec.allowed_chats and str(message.chat.id) not in self.spec.allowed_chats:
            return "chat not in allowed_chats"
        return None

    # -- replies -------------------------------------------------------------------------------

    async def _keep_typing(self, route: _Route) -> None:
        assert self._app is not None
        bot = self._app.bot
        while True:
            try:
                await bot.send_chat_action(
                    route.chat_id, ChatAction.TYPING, message_thread_id=route.thread_id
                )
            except TelegramError as exc:
                log.debug("telegram: sendChatAction failed, no typing indicator: %s", self._redact(exc))
                return
            await asyncio.sleep(TYPING_EVERY)

    async def _send_reply(self, route: _Route, text: str) -> None:
        for number, chunk in enumerate(split_message(text, MESSAGE_LIMIT), start=1):
            try:
                route = await self._send_chunk(route, chunk)
            except TelegramError as exc:
                reason = self._redact(exc)
                log.error("telegram: reply to %s failed at part %d: %s", route.key, number, reason)
                assert self._host is not None
                await self._host.audit(
                    "channel",
                    "send_failed",
                    conversation_key=route.key,
                    data={"channel": CHANNEL, "chat_id": str(route.chat_id), "part": number, "error": reason},
                )
                return

    async def _send_chunk(self, route: _Route, text: str) -> _Route:
        """Send one message, waiting out flood limits and retrying transient failures.

        Returns the route actually used (a group upgraded to a supergroup has a new chat id).
        """
        assert self._app is not None
        bot = self._app.bot
        delays = backoff_delays(self.retry_base, cap=10.0)
        network_failures = rate_limits = 0
        while True:
            try:
                await bot.send_message(route.chat_id, text, message_thread_id=route.thread_id)
                return route
            except RetryAfter as exc:
                rate_limits += 1
                if rate_limits > RATE_LIMIT_RETRIES:
                    raise
                await asyncio.sleep(_retry_after_seconds(exc))
            except ChatMigrated as exc:
                route = _Route(chat_id=int(exc.new_chat_id), thread_id=route.thread_id, key=route.key)
            except BadRequest:
                raise  # the request itself is wrong (chat gone, thread deleted); sending it again won't help
            except NetworkError as exc:  # TimedOut, 5xx, a dropped connection
                network_failures += 1
                if network_failures > NETWORK_RETRIES:
                    raise
                log.warning("telegram: send to %s failed, retrying: %s", route.key, self._redact(exc))
                await asyncio.sleep(next(delays))

    async def _on_handler_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        # PTB routes every handler exception here; log it and keep the application running
        log.error("telegram: handling an update failed for agent %s", self.agent, exc_info=context.error)


class _PollingRequest(HTTPXRequest):
    """The getUpdates connection; it tells the channel what PTB's polling loop does not:
    that a poll succeeded again after failures, and that the token was refused."""

    def __init__(
        self,
        *,
        on_success: Callable[[], None],
        on_token_refused: Callable[[int], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._on_success = on_success
        self._on_token_refused = on_token_refused

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        # do_request is PTB's extension point: it sees the HTTP status before PTB turns it into an error
        code, payload = await super().do_request(*args, **kwargs)
        if 200 <= code <= 299:
            self._on_success()
        elif code in (401, 404):  # what PTB raises InvalidToken for
            self._on_token_refused(code)
        return code, payload


def _starts_with_command(message: Message) -> bool:
    return any(entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0 for entity in message.entities)


def _retry_after_seconds(exc: RetryAfter) -> float:
    # RetryAfter.retry_after is an int or a timedelta depending on PTB_TIMEDELTA, and warns when an int
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
