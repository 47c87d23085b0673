"""Slack: slack-bolt's AsyncApp over Socket Mode or the Events API (HTTP), answering in threads.

Each `message` and `app_mention` event reaches `receive` (the chat base):
from bolt in Socket Mode, from `handle_http` (verify, then parse; see
slack_events) over the Events API. `route_message` decides whether and where
it is answered, and the base handles it. Socket Mode reconnection is
supervised here (see slack_socket).

Every message is answered once: its event id is "<channel>:<ts>", the same for
the `message` and the `app_mention` event of one message and for Slack's
retries, and the host answers a repeated id with Reply(duplicate=True).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
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
from starlette.responses import JSONResponse, Response

from agentd.backoff import backoff_delays
from agentd.channels.callbacks import CallbackRefused, read_body
from agentd.channels.chat import AllowList, ChatChannel, Route
from agentd.channels.slack_events import SIGNATURE_HEADER, TIMESTAMP_HEADER, parse_payload, verify_signature
from agentd.channels.slack_files import attachments_of, missing_file_scopes, upload
from agentd.channels.slack_routing import SlackTarget, route_message, target_of
from agentd.channels.slack_socket import SupervisedSocketModeHandler
from agentd.config.slack import SlackSpec
from agentd.errors import OperatorError
from agentd.events import ChannelHost, OutgoingFile

__all__ = ["SlackChannel", "SlackRefused", "route_message"]

logger = logging.getLogger(__name__)

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


class SlackChannel(ChatChannel[dict[str, Any], SlackTarget]):
    """One agent's Slack app. Socket Mode with `app_token`; Events API over HTTP with `signing_secret`.

    In HTTP mode it is also an HttpChannel: the daemon mounts `handle_http` at
    POST `http_path`. In Socket Mode `http_path` is absent, so
    `isinstance(channel, HttpChannel)` is false and nothing is mounted.
    """

    name = "slack"
    # Slack accepts longer texts but folds anything past ~4000 characters behind "Show more".
    message_limit = 3900
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
        super().__init__(agent, AllowList(spec.allowed_users, spec.allowed_channels, "channel"))
        self.spec = spec
        self.exclusive = spec.app_token is not None  # Socket Mode; the Events API is served by any daemon
        if spec.signing_secret:
            self.http_path = f"/slack/{agent}/events"
        self._ping_interval = ping_interval
        self._reconnect_base = reconnect_base
        self._reconnect_cap = reconnect_cap
        self._connect_timeout = connect_timeout
        self.drain_seconds = stop_grace
        self.stream_every = spec.stream_edit_seconds if spec.stream else None  # chat.update: ~1/s (tier 3)
        self._watch_interval = min(1.0, ping_interval)

        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._app: AsyncApp | None = None
        self._socket: SupervisedSocketModeHandler | None = None
        self._bot_user_id: str | None = None
        self._ready = False
        self._socket_wake = asyncio.Event()  # set when the socket is closed on purpose, or on stop
        self._finished = asyncio.Event()
        self._started = False

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
            await asyncio.wait_for(self._finished.wait(), self.drain_seconds + 5.0)
        except TimeoutError:
            logger.warning("slack channel of agent %s did not stop in time", self.agent)

    async def handle_http(self, request: Request) -> Response:
        """Events API endpoint: verify, then parse (slack_events); answer url_verification; ack at once.

        Forged or stale: 401. Malformed: 400. Too large: 413. Not running: 503
        (Slack retries it, so nothing is lost while we start or stop). Never 5xx otherwise.
        """
        secret = self.spec.signing_secret
        if not secret:
            return Response(status_code=404)  # Socket Mode: nothing is served over HTTP
        headers = request.headers
        try:
            body = await read_body(request)
            verify_signature(
                secret, body, headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER), time.time()
            )
            if not self._ready or self._stopping.is_set():
                raise CallbackRefused(503, "slack channel not running")
            payload = parse_payload(body)
        except CallbackRefused as refused:
            return refused.response(self.name)
        if payload["type"] == "url_verification":
            return JSONResponse({"challenge": payload["challenge"]})
        if payload["type"] == "event_callback":
            # A retry (X-Slack-Retry-Num) carries the same event id: the host answers it once.
            self.receive(payload)
        return Response(status_code=200)

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
            # The client retries a chunk by itself (Retry-After on 429, 5xx, dropped connections),
            # so the chat base does not retry on top of it.
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

        async def on_message(body: dict[str, Any]) -> None:
            # Returns at once (bolt acks); the turn runs in a task the base tracks.
            self.receive(body)

        async def ignore() -> None:
            # Without a listener bolt answers other subscribed events with 404 and Slack retries them.
            return None

        app.event("message")(on_message)
        app.event("app_mention")(on_message)
        app.event(re.compile(".*"))(ignore)
        self._app = app

    async def _authenticate(self) -> bool:
        """auth.test until it answers; a refused token raises SlackRefused. False if stopped meanwhile."""
        assert self._web is not None
        delays = self._delays()
        while not self._stopping.is_set():
            try:
                auth = await self._web.auth_test()
                self._bot_user_id = auth.get("user_id")
                if missing := missing_file_scopes(auth.headers):
                    why = "files people share cannot be read, nor a reply's files sent"
                    logger.warning(
                        "slack channel of agent %s: the bot token lacks %s: %s", self.agent, missing, why
                    )
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
        self._socket = sm = SupervisedSocketModeHandler(
            self._app, app_token, self._ping_interval, self._socket_wake
        )
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

    async def _connect_socket(self, sm: SupervisedSocketModeHandler, app_token: str) -> None:
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

    # -- the chat base's platform part ----------------------------------------------------------------------

    def match(self, raw: dict[str, Any]) -> Route[SlackTarget] | None:
        event = raw.get("event")
        if not isinstance(event, dict):
            return None
        spec = self.spec
        route = route_message(
            event,
            bot_user_id=self._bot_user_id,
            respond_to=spec.respond_to,
            threads=spec.threads,
            per_user=spec.per_user,
            team=raw.get("team_id"),
        )
        files = attachments_of(event, spec.bot_token, self._web) if route is not None else ()
        return dataclasses.replace(route, attachments=files) if route is not None and files else route

    def target_for(self, conversation_key: str) -> SlackTarget | None:
        return target_of(conversation_key)

    async def send_chunk(self, target: SlackTarget, text: str, part: int) -> tuple[str, str]:
        assert self._web is not None
        posted = await self._web.chat_postMessage(
            channel=target.channel, text=text, thread_ts=target.thread_ts
        )
        return str(posted.get("channel") or target.channel), str(posted["ts"])

    async def send_file(self, target: SlackTarget, file: OutgoingFile, part: int) -> str:
        assert self._web is not None
        return await upload(self._web, target.channel, target.thread_ts, file)

    async def edit_chunk(self, target: SlackTarget, sent: tuple[str, str], text: str) -> None:
        assert self._web is not None
        channel, ts = sent
        await self._web.chat_update(channel=channel, ts=ts, text=text)

    async def delete_chunk(self, target: SlackTarget, sent: tuple[str, str]) -> None:
        assert self._web is not None
        channel, ts = sent
        await self._web.chat_delete(channel=channel, ts=ts)

    def describe_error(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {_api_error(exc) or exc}"

    # -- plumbing ----------------------------------------------------------------------------------------------

    async def _close(self) -> None:
        """Stop intake, let replies in flight finish (briefly), then close every client."""
        self._ready = False
        if self._socket is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._socket.close_async(), 2.0)
        await self.drain()
        if self._session is not None:
            await self._session.close()

    def _delays(self) -> Iterator[float]:
        return backoff_delays(self._reconnect_base, self._reconnect_cap)


def _api_error(exc: BaseException) -> str | None:
    """Slack's error code ("invalid_auth", "ratelimited" ...) of a SlackApiError, if it has one."""
    if not isinstance(exc, SlackApiError):
        return None
    data = getattr(exc.response, "data", None)
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, str) else None
