"""Slack: slack-bolt's AsyncApp over Socket Mode or the Events API (HTTP), answering in threads.

Socket Mode reconnection is ours. The SDK's SocketModeClient can reconnect by
itself, but it retries at a fixed ping interval forever, reuses a URL that may
have expired, keeps going on a revoked token, and tells nobody. We switch that
off (every SDK reconnect request just closes the socket) and supervise:
apps.connections.open -> connect -> watch -> backoff -> again, reporting
"running"/"reconnecting" to the host.

Every message is answered once: its event id is "<channel>:<ts>", the same for
the `message` and the `app_mention` event of one message and for Slack's
retries, and the host answers a repeated id with Reply(duplicate=True).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import Response

from agentd.channels.common import backoff_delays, split_message
from agentd.config.slack import SlackSpec
from agentd.errors import OperatorError
from agentd.events import ChannelHost, InboundEvent

logger = logging.getLogger(__name__)

# Slack accepts longer texts but folds anything past ~4000 characters behind "Show more".
REPLY_CHUNK = 3900
# Message subtypes that are still a person talking; every other subtype (edits,
# deletions, joins, bot_message ...) is ignored.
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
# Errors that mean the token itself is refused: retrying cannot help.
_REFUSALS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "team_access_not_granted",
    }
)


class SlackRefused(OperatorError):
    """Slack refused a token; the operator has to fix `channels.slack`."""


# -- routing: which messages we answer, and in which conversation ------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    """Where one Slack message goes: its conversation, and where the reply is posted."""

    conversation_key: str
    channel: str
    ts: str
    user: str
    text: str
    thread_ts: str | None  # the thread this conversation lives in (None: the channel itself)
    reply_thread_ts: str | None  # where the reply goes (None: top level)

    @property
    def event_id(self) -> str:
        return f"{self.channel}:{self.ts}"


def route_message(
    event: dict[str, Any], *, bot_user_id: str | None, respond_to: str, threads: bool, per_user: bool
) -> Route | None:
    """The route of a `message` or `app_mention` event, or None when we do not answer it."""
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _PERSON_SUBTYPES or event.get("bot_id") or event.get("bot_profile"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not (user and channel and ts) or user == bot_user_id:
        return None
    # app_mention carries no channel_type; DM conversation ids start with D.
    is_dm = event.get("channel_type") == "im" or (kind == "app_mention" and channel.startswith("D"))
    if kind == "message" and not is_dm and respond_to == "mentions":
        return None  # in channels, a mention arrives as its own app_mention event
    text = strip_mention(event.get("text") or "", bot_user_id)
    in_thread = event.get("thread_ts")
    if is_dm:
        # A DM is one person's conversation; only an explicit thread splits it further.
        thread = in_thread if threads else None
        key = f"slack:{channel}" + (f":{thread}" if thread else "")
        return Route(key, channel, ts, user, text, thread, in_thread)
    if threads:
        thread = in_thread or ts  # a top-level message starts a thread of its own
        key, reply_to = f"slack:{channel}:{thread}", thread
    else:
        thread, reply_to, key = None, in_thread, f"slack:{channel}"
    if per_user:
        key += f":user:{user}"
    return Route(key, channel, ts, user, text, thread, reply_to)


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """Remove `<@BOTID>` (or `<@BOTID|name>`) wherever it is, so "@bot /status" reads "/status"."""
    if not bot_user_id:
        return text.strip()
    return re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "", text).strip()


# -- Socket Mode with our own reconnection -------------------------------------------------------------


class _SupervisedSocketModeClient(SocketModeClient):
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


class _SocketModeHandler(AsyncSocketModeHandler):
    """bolt's AsyncSocketModeHandler over `_SupervisedSocketModeClient`."""

    client: _SupervisedSocketModeClient

    def __init__(self, app: AsyncApp, app_token: str, ping_interval: float, dropped: asyncio.Event):
        # Not calling super().__init__: it would build a second client (an aiohttp session and a task).
        self.app = app
        self.app_token = app_token
        self.client = _SupervisedSocketModeClient(
            dropped=dropped,
            app_token=app_token,
            logger=app.logger,
            web_client=app.client,
            ping_interval=ping_interval,
            auto_reconnect_enabled=False,
        )
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]


# -- the channel ------------------------------------------------------------------------------------------


class SlackChannel:
    """One agent's Slack app. Socket Mode with `app_token`; Events API over HTTP with `signing_secret`.

    In HTTP mode it is also an HttpChannel: the daemon mounts `handle_http` at
    POST `http_path`. In Socket Mode `http_path` is absent, so
    `isinstance(channel, HttpChannel)` is false and nothing is mounted.
    """

    name = "slack"
    http_path: str  # set only in HTTP mode

    def __init__(
        self,
        agent: str,
        spec: SlackSpec,
        *,
        ping_interval: float = 10.0,
        reconnect_base: float = 1.0,
        reconnect_cap: float = 60.0,
        connect_timeout: float = 15.0,
        stop_grace: float = 3.0,
    ):
        self.agent = agent
        self.spec = spec
        if spec.signing_secret:
            self.http_path = f"/slack/{agent}/events"
        self._ping_interval = ping_interval
        self._reconnect_base = reconnect_base
        self._reconnect_cap = reconnect_cap
        self._connect_timeout = connect_timeout
        self._stop_grace = stop_grace
        self._watch_interval = min(1.0, ping_interval)

        self._host: ChannelHost | None = None
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._app: AsyncApp | None = None
        self._socket: _SocketModeHandler | None = None
        self._http_handler: AsyncSlackRequestHandler | None = None
        self._bot_user_id: str | None = None
        self._ready = False
        self._stopping = asyncio.Event()
        self._socket_wake = asyncio.Event()  # set when the socket is closed on purpose, or on stop
        self._finished = asyncio.Event()
        self._started = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._denied: deque[str] = deque(maxlen=256)  # event ids already audited as denied

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def run(self, host: ChannelHost) -> None:
        self._host = host
        self._started = True
        host.set_status(self.name, "starting")
        final = "stopped"
        try:
            self._open_clients()
            if not await self._authenticate():
                return
            if self.spec.app_token:
                await self._run_socket_mode(self.spec.app_token)
            else:
                self._ready = True
                host.set_status(self.name, "running")
                await self._stopping.wait()
        except SlackRefused as exc:
            final = "failed"
            logger.error("slack channel of agent %s: %s", self.agent, exc)
            host.set_status(self.name, "failed", str(exc))
            raise
        except Exception as exc:
            final = "failed"
            logger.exception("slack channel of agent %s crashed", self.agent)
            host.set_status(self.name, "failed", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            await self._close()
            if final == "stopped":
                host.set_status(self.name, "stopped")
            self._finished.set()

    async def stop(self) -> None:
        self._stopping.set()
        self._socket_wake.set()
        if not self._started:
            return
        try:
            await asyncio.wait_for(self._finished.wait(), self._stop_grace + 5.0)
        except TimeoutError:
            logger.warning("slack channel of agent %s did not stop in time", self.agent)

    async def handle_http(self, request: Request) -> Response:
        """Events API endpoint: bolt checks the signature (401), answers url_verification, acks at once."""
        if self._http_handler is None or not self._ready or self._stopping.is_set():
            # Slack retries a 503, so nothing is lost while we start or stop.
            return Response("slack channel not running", status_code=503)
        return await self._http_handler.handle(request)

    # -- setup ---------------------------------------------------------------------------------------------

    def _open_clients(self) -> None:
        base_url = self.spec.api_base_url or AsyncWebClient.BASE_URL
        if not base_url.endswith("/"):
            base_url += "/"  # the SDK builds URLs with urljoin(base_url, method)
        self._session = aiohttp.ClientSession()
        self._web = AsyncWebClient(
            token=self.spec.bot_token,
            base_url=base_url,
            session=self._session,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(max_retry_count=2),
                AsyncRateLimitErrorRetryHandler(max_retry_count=3),  # sleeps Retry-After
                AsyncServerErrorRetryHandler(max_retry_count=2),
            ],
        )
        app = AsyncApp(
            client=self._web,
            signing_secret=self.spec.signing_secret or "",
            logger=logging.getLogger(f"{__name__}.bolt"),
        )

        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            # Return at once (bolt acks); the turn runs in a task we can wait for on stop.
            self._spawn(self._handle_event(body, event))

        async def ignore() -> None:
            # Without a listener bolt answers other subscribed events with 404 and Slack retries them.
            return None

        app.event("message")(on_message)
        app.event("app_mention")(on_message)
        app.event(re.compile(".*"))(ignore)
        self._app = app
        if self.spec.signing_secret:
            self._http_handler = AsyncSlackRequestHandler(app)

    async def _authenticate(self) -> bool:
        """auth.test until it answers; a refused token raises SlackRefused. False if stopped meanwhile."""
        assert self._web is not None
        delays = self._delays()
        while not self._stopping.is_set():
            try:
                auth = await self._web.auth_test()
                self._bot_user_id = auth.get("user_id")
                return True
            except SlackApiError as exc:
                if _api_error(exc) in _REFUSALS:
                    raise SlackRefused(
                        f"Slack refused the bot token (auth.test: {_api_error(exc)}); check channels.slack.bot_token"
                    ) from exc
                reason = f"auth.test failed: {_api_error(exc) or exc}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                reason = f"Slack unreachable: {type(exc).__name__}: {exc}"
            logger.warning("slack channel of agent %s: %s; retrying", self.agent, reason)
            self._status("reconnecting", reason)
            if await self._pause(next(delays)):
                return False
        return False

    # -- Socket Mode supervision ---------------------------------------------------------------------------

    async def _run_socket_mode(self, app_token: str) -> None:
        assert self._app is not None
        self._socket = sm = _SocketModeHandler(self._app, app_token, self._ping_interval, self._socket_wake)
        self._ready = True
        delays = self._delays()
        while not self._stopping.is_set():
            try:
                await self._connect_socket(sm, app_token)
            except SlackRefused:
                raise
            except Exception as exc:
                reason = f"Socket Mode connect failed: {type(exc).__name__}: {_api_error(exc) or exc}"
                logger.warning("slack channel of agent %s: %s; retrying", self.agent, reason)
                self._status("reconnecting", reason)
                if await self._pause(next(delays)):
                    return
                continue
            self._status("running")
            connected_at = time.monotonic()
            await self._watch_socket(sm.client)
            if self._stopping.is_set():
                return
            if time.monotonic() - connected_at > self._reconnect_cap:
                delays = self._delays()  # it was a good connection: start backing off from the bottom
            if sm.client.refresh_requested:
                sm.client.refresh_requested = False
                logger.info("slack channel of agent %s: Slack asked for a reconnect", self.agent)
                continue
            logger.warning("slack channel of agent %s: Socket Mode connection lost; reconnecting", self.agent)
            self._status("reconnecting", "Socket Mode connection lost")
            if await self._pause(next(delays)):
                return

    async def _connect_socket(self, sm: _SocketModeHandler, app_token: str) -> None:
        assert self._web is not None
        try:
            opened = await self._web.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            if _api_error(exc) in _REFUSALS:
                raise SlackRefused(
                    f"Slack refused the app token (apps.connections.open: {_api_error(exc)}); "
                    "check channels.slack.app_token (xapp-..., scope connections:write)"
                ) from exc
            raise
        sm.client.wss_uri = opened["url"]
        # connect() retries a failing URL forever by itself; bound it and retry with a fresh URL.
        await asyncio.wait_for(sm.connect_async(), self._connect_timeout)

    async def _watch_socket(self, client: SocketModeClient) -> None:
        """Return when the socket is gone (closed, or pings unanswered) or we are stopping."""
        while not self._stopping.is_set():
            self._socket_wake.clear()
            if not await client.is_connected():
                return
            # A drop without a close handshake shows only as a closed session: poll for it too.
            await self._pause(self._watch_interval, self._socket_wake)

    # -- one message -----------------------------------------------------------------------------------------

    async def _handle_event(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        host = self._host
        assert host is not None
        spec = self.spec
        route = route_message(
            event,
            bot_user_id=self._bot_user_id,
            respond_to=spec.respond_to,
            threads=spec.threads,
            per_user=spec.per_user,
        )
        if route is None:
            return
        refusal = self._refusal(route)
        if refusal is not None:
            if route.event_id not in self._denied:  # message + app_mention of one message: audit once
                self._denied.append(route.event_id)
                await host.audit(
                    "permission",
                    "denied",
                    conversation_key=route.conversation_key,
                    data={
                        "channel": self.name,
                        "user_id": route.user,
                        "slack_channel": route.channel,
                        "reason": refusal,
                    },
                )
            return
        inbound = InboundEvent(
            agent=self.agent,
            conversation_key=route.conversation_key,
            text=route.text,
            channel=self.name,
            user_id=route.user,
            event_id=route.event_id,
            metadata={
                "team": body.get("team_id") or event.get("team"),
                "channel": route.channel,
                "ts": route.ts,
                "thread_ts": route.thread_ts,
            },
        )
        reply = await host.dispatch(inbound)
        if reply.duplicate or not reply.text.strip():
            return
        await self._send(route, reply.text)

    def _refusal(self, route: Route) -> str | None:
        if self.spec.allowed_users and route.user not in self.spec.allowed_users:
            return "user not in allowed_users"
        if self.spec.allowed_channels and route.channel not in self.spec.allowed_channels:
            return "channel not in allowed_channels"
        return None

    async def _send(self, route: Route, text: str) -> None:
        """Post the reply (split if long) into the route's thread; a final failure is logged and audited."""
        assert self._web is not None and self._host is not None
        chunks = split_message(text, REPLY_CHUNK)
        for number, chunk in enumerate(chunks, start=1):
            try:
                # Retries (Retry-After on 429, 5xx, dropped connections) happen inside the client.
                await self._web.chat_postMessage(
                    channel=route.channel, text=chunk, thread_ts=route.reply_thread_ts
                )
            except Exception as exc:
                error = f"{type(exc).__name__}: {_api_error(exc) or exc}"
                logger.error(
                    "slack channel of agent %s: reply to %s failed (part %d of %d): %s",
                    self.agent,
                    route.conversation_key,
                    number,
                    len(chunks),
                    error,
                )
                await self._host.audit(
                    "channel",
                    "send_failed",
                    conversation_key=route.conversation_key,
                    data={
                        "channel": self.name,
                        "slack_channel": route.channel,
                        "thread_ts": route.reply_thread_ts,
                        "part": number,
                        "parts": len(chunks),
                        "error": error,
                    },
                )
                return

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(self._guarded(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:
            # One bad message must never take the channel down.
            logger.exception("slack channel of agent %s: handling a message failed", self.agent)

    async def _close(self) -> None:
        """Stop intake, let replies in flight finish (briefly), then close every client."""
        self._ready = False
        if self._socket is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._socket.close_async(), 2.0)
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self._stop_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _pause(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Sleep, waking early on stop (or on `wake`); True when stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for((wake or self._stopping).wait(), seconds)
        return self._stopping.is_set()

    def _delays(self) -> Iterator[float]:
        return backoff_delays(self._reconnect_base, self._reconnect_cap)

    def _status(self, status: str, error: str | None = None) -> None:
        if self._host is not None:
            self._host.set_status(self.name, status, error)


def _api_error(exc: BaseException) -> str | None:
    """Slack's error code ("invalid_auth", "ratelimited" ...) of a SlackApiError, if it has one."""
    if not isinstance(exc, SlackApiError):
        return None
    data = getattr(exc.response, "data", None)
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, str) else None
