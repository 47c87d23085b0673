"""Telegram: python-telegram-bot v22 on its coroutine API, by long polling or the daemon's own webhook route.

Polling runs PTB's Updater (it retries lost connections; our error callback
turns its failures into a "reconnecting" status and the next good poll into
"running"). Webhook mode has no Updater and no tornado: the daemon mounts
`handle_http` at `http_path`, which checks the secret header and puts the
update on the Application's queue. Either way one MessageHandler hands each
update to `receive` (the chat base): `route_update` decides whether and where
it is answered, and the reply goes back in the same chat (and topic), split
at 4096 characters, honouring flood limits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import itertools
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from telegram import BotCommand, Message, Update
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, ExtBot, MessageHandler, filters
from telegram.request import HTTPXRequest

from agentd.backoff import backoff_delays
from agentd.channels.callbacks import CallbackRefused, json_object, read_body
from agentd.channels.chat import AllowList, ChatChannel, Route
from agentd.channels.telegram_files import FILES, upload
from agentd.channels.telegram_intake import Intake
from agentd.channels.telegram_routing import Bot, TelegramTarget, target_of
from agentd.config.telegram import TelegramSpec
from agentd.events import COMMANDS, ChannelHost, OutgoingFile

log = logging.getLogger(__name__)

CHANNEL = "telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
DEFAULT_API = "https://api.telegram.org"
MENU = tuple(BotCommand(name, what) for name, what in COMMANDS.items())  # the commands /help lists
TYPING_EVERY = 4.5  # Telegram shows "typing…" for 5 s after each sendChatAction
NETWORK_RETRIES = 3  # a reply survives this many transient failures (timeouts, 5xx, dropped connections)
STOP_SECONDS = 4.5  # stop() waits at most this long for run() to close everything (the daemon allows 5 s)
MESSAGE_LIMIT = 4096
GROUP_EDIT_SECONDS = 3.0  # a streamed reply in a group is edited at most this often (20 messages a minute)


class TelegramChannel(ChatChannel[Update, TelegramTarget]):
    """One agent's Telegram bot. Built by the registry as ``TelegramChannel(agent, spec)``."""

    name = CHANNEL
    message_limit = MESSAGE_LIMIT
    typing_every = TYPING_EVERY
    # Set only in webhook mode, so `isinstance(channel, HttpChannel)` is true only then
    # and the daemon mounts a route only for bots that receive webhooks.
    http_path: str
    retry_base = 1.0  # first backoff delay in seconds (start-up retries, failed sends); tests lower it

    def __init__(self, agent: str, spec: TelegramSpec) -> None:
        super().__init__(agent, AllowList(spec.allowed_users, spec.allowed_chats, "chat"))
        self.spec = spec
        self.stream_every = spec.stream_edit_seconds if spec.stream else None
        if spec.mode == "webhook":
            self.http_path = f"/telegram/{agent}"
        self.exclusive = spec.mode == "polling"  # getUpdates allows one poller; webhooks reach any daemon
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._requests: list[HTTPXRequest] = []
        self._bot = Bot(0, "")
        self._moved: dict[int, int] = {}  # chat ids of groups that became supergroups -> the new id
        self.intake = Intake(self.handle, self.track, self._stopping)  # routes, files, albums as one
        self._closed = asyncio.Event()
        self._started = False
        self._reconnecting = False
        self._failure: str | None = None

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
                await self._stopping.wait()
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
        self._stopping.set()
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
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE & (filters.TEXT | FILES), self._on_update))
        app.add_error_handler(self._on_handler_error)
        return app

    async def _connect(self, app: Application[Any, Any, Any, Any, Any, Any]) -> bool:
        """Log in, register commands, start taking updates. False when stop() came first."""
        if not await self._retrying(app.initialize, "getMe"):
            return False
        self._bot = Bot(app.bot.id, app.bot.username)
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
        while not self._stopping.is_set():
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
            if await self._pause(wait):
                return False
        return False

    async def _register_commands(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        try:
            await app.bot.set_my_commands(MENU)
        except InvalidToken:
            raise
        except TelegramError as exc:  # the menu is a convenience; the bot works without it
            log.warning("telegram: setMyCommands failed for agent %s: %s", self.agent, self._redact(exc))

    async def _close(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        # stop intake first, then let in-flight turns send their replies, then close the clients
        steps: list[Callable[[], Awaitable[Any]]] = []
        if app.updater is not None and app.updater.running:
            steps.append(app.updater.stop)
        steps.append(self.drain)
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

    # -- connection status ---------------------------------------------------------------------

    def _on_poll_error(self, exc: TelegramError) -> None:
        # PTB's polling loop retries after this returns (1 s, growing to 30 s); it must not raise.
        log.warning("telegram: polling failed for agent %s, retrying: %s", self.agent, self._redact(exc))
        self._report_reconnecting(self._redact(exc))

    def _on_poll_success(self) -> None:
        if self._reconnecting and not self._stopping.is_set():
            self._reconnecting = False
            self._status("running")

    def _on_token_revoked(self, status: int) -> None:
        # PTB's polling loop ends silently on InvalidToken; end the run with a reason instead. The stop
        # is deferred a moment so PTB's loop sees its own error first (stopping it in the same loop
        # iteration leaves that error unretrieved).
        if self._failure is None:
            self._failure = (
                f"Telegram refused the bot token while polling (HTTP {status}); check channels.telegram.token"
            )
            asyncio.get_running_loop().call_later(0.1, self._stopping.set)

    def _report_reconnecting(self, why: str) -> None:
        if not self._reconnecting:
            self._reconnecting = True
            self._status("reconnecting", why)

    def _redact(self, exc: BaseException | str) -> str:
        return str(exc).replace(self.spec.token, "<token>")

    # -- webhook mode ----------------------------------------------------------------------------

    async def handle_http(self, request: Request) -> Response:
        """POST /telegram/<agent>: verify the secret header, then parse, then queue the update.

        Missing or wrong secret: 403 (as PTB's own webhook server answers). Not JSON,
        not an object, not an update: 400. Too large: 413. Not running: 503 (Telegram
        delivers it again later). Every refusal says why; none is a 5xx.
        """
        if self.spec.mode != "webhook":
            return Response(status_code=404)
        try:
            body = await read_body(request)
            given = request.headers.get(SECRET_HEADER, "").encode()
            if not hmac.compare_digest(given, str(self.spec.secret_token).encode()):
                raise CallbackRefused(403, f"{SECRET_HEADER} is missing or wrong")
            app = self._app
            if app is None or not app.running or self._stopping.is_set():
                raise CallbackRefused(503, "telegram channel not running")
            update = _parse_update(json_object(body), app.bot)
        except CallbackRefused as refused:
            return refused.response(self.name)
        await app.update_queue.put(update)
        return Response(status_code=200)

    # -- the chat base's platform part -------------------------------------------------------

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        self.receive(update)  # returns at once; the turn runs in a task the base tracks

    def match(self, raw: Update) -> Route[TelegramTarget] | None:
        return self.intake.match(raw, self._bot, self._api(), self._redact, self.spec)

    def target_for(self, conversation_key: str) -> TelegramTarget | None:
        return target_of(conversation_key)

    async def send_chunk(self, target: TelegramTarget, text: str, part: int) -> Message:
        bot = self._api()
        chat_id = self._moved.get(target.chat_id, target.chat_id)
        try:
            return await bot.send_message(chat_id, text, message_thread_id=target.thread_id)
        except ChatMigrated as exc:
            # The group became a supergroup with a new id: send there, now and from now on.
            self._moved[target.chat_id] = int(exc.new_chat_id)
            return await bot.send_message(int(exc.new_chat_id), text, message_thread_id=target.thread_id)

    async def send_file(self, target: TelegramTarget, file: OutgoingFile, part: int) -> Message:
        return await upload(
            self._api(), self._moved.get(target.chat_id, target.chat_id), target.thread_id, file
        )

    async def edit_chunk(self, target: TelegramTarget, sent: Message, text: str) -> None:
        try:
            await self._api().edit_message_text(text, chat_id=sent.chat_id, message_id=sent.message_id)
        except BadRequest as exc:
            # Telegram trims what it stores: an edit that differs only in trailing space changes nothing.
            if "not modified" not in str(exc).lower():
                raise

    async def delete_chunk(self, target: TelegramTarget, sent: Message) -> None:
        await self._api().delete_message(sent.chat_id, sent.message_id)

    def stream_edit_every(self, target: TelegramTarget) -> float | None:
        every = self.stream_every
        # Telegram allows a bot about one message a second in a chat, 20 a minute in a group; edits count.
        return None if every is None else max(every, GROUP_EDIT_SECONDS) if target.chat_id < 0 else every

    async def show_typing(self, target: TelegramTarget) -> None:
        chat_id = self._moved.get(target.chat_id, target.chat_id)
        await self._api().send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=target.thread_id)

    def rate_limit_wait(self, exc: Exception) -> float | None:
        return _retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None

    def is_transient(self, exc: Exception) -> bool:
        # TimedOut, 5xx, a dropped connection; a BadRequest (chat gone, thread deleted) stays wrong when resent
        return isinstance(exc, NetworkError) and not isinstance(exc, BadRequest)

    def send_retry_delays(self) -> Iterable[float]:
        return itertools.islice(backoff_delays(self.retry_base, cap=10.0), NETWORK_RETRIES)

    def describe_error(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {self._redact(exc)}"

    def _api(self) -> ExtBot[Any]:
        assert self._app is not None
        return self._app.bot

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


def _parse_update(data: dict[str, Any], bot: ExtBot[Any]) -> Update:
    """A webhook body as an Update; CallbackRefused (400) when it is not one."""
    update_id = data.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        raise CallbackRefused(400, "not a Telegram update: no integer `update_id`")
    try:
        return Update.de_json(data, bot)
    except Exception as exc:  # de_json fails in many ways (KeyError, TypeError ...) on a malformed update
        raise CallbackRefused(400, f"not a Telegram update: {type(exc).__name__}: {exc}") from None


def _retry_after_seconds(exc: RetryAfter) -> float:
    # RetryAfter.retry_after is an int or a timedelta depending on PTB_TIMEDELTA, and warns when an int
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
