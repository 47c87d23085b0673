"""A fake Slack on 127.0.0.1 that speaks the real wire protocol, for testing the Slack channel.

What it serves (one aiohttp server, started in the running loop):

- the Web API, ``POST /api/{method}`` with ``Authorization: Bearer <token>``
  (JSON or form bodies): ``auth.test``, ``chat.postMessage``,
  ``apps.connections.open``; a token it does not know gets ``invalid_auth``,
  an unknown method ``unknown_method``, like Slack;
- the Socket Mode websocket at ``/link/?ticket=...`` (the URL
  ``apps.connections.open`` hands out): it sends ``hello``, pushes
  ``events_api`` envelopes and records the client's acks.

- files as Slack serves them: `file_object` puts a file behind ``url_private_download``
  (``/files-pri/...``), which answers the bytes to ``Authorization: Bearer <bot token>``
  and, to anything else, 200 with an HTML sign-in page, as Slack does; uploads go
  ``files.getUploadURLExternal`` -> POST the bytes to its ``upload_url`` ->
  ``files.completeUploadExternal`` (`shared_files` records what was shared where);
  ``files.info`` describes a file (`connect_stub` is a file as Slack Connect shows it).

For the Events API over HTTP it builds correctly signed requests
(`signed_request`) that a test POSTs to the app under test.

Test controls: `push_event` (Socket Mode), `rate_limit_next_post` (429 +
Retry-After), `fail_next_posts` / `fail_next` (5xx on any method),
`drop_sockets` (the connection dies under the client), `request_refresh`
(Slack's "disconnect" envelope), and waits that poll with timeouts: `wait_for_posts`,
`wait_for_connections`, `wait_for_ack`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import WSMsgType, web


@dataclass
class ApiCall:
    """One Web API call as the fake saw it."""

    method: str
    params: dict[str, Any]
    token: str | None
    status: int = 200
    at: float = field(default_factory=time.monotonic)


@dataclass
class SharedFile:
    """A file the bot uploaded and shared with files.completeUploadExternal."""

    id: str
    filename: str
    title: str | None
    data: bytes
    channel: str | None
    thread_ts: str | None
    initial_comment: str | None


@dataclass
class _PlannedFailure:
    status: int
    retry_after: int | None = None


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    request: web.Request
    number: int
    acks: list[dict[str, Any]] = field(default_factory=list)


class FakeSlack:
    def __init__(
        self,
        *,
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-fake-app-token",
        signing_secret: str = "fake-signing-secret",
        team_id: str = "T0FAKE",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        app_id: str = "A0APP",
    ):
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id

        self.scopes = [
            "app_mentions:read",
            "chat:write",
            "channels:history",
            "im:history",
            "files:read",
            "files:write",
        ]
        self.calls: list[ApiCall] = []
        self.posts: list[dict[str, Any]] = []  # params of each accepted chat.postMessage
        self.updates: list[dict[str, Any]] = []  # params of each accepted chat.update
        self.deletes: list[dict[str, Any]] = []  # params of each accepted chat.delete
        self.messages: dict[str, dict[str, Any]] = {}  # ts -> the bot's message as it is now, oldest first
        self.acks: list[dict[str, Any]] = []  # every Socket Mode ack, in arrival order
        self.connections = 0  # websocket connections that got "hello"
        self.hosted: dict[str, tuple[str, bytes]] = {}  # url path -> (file name, bytes) of user files
        self.downloads: list[tuple[str, bool]] = []  # (url path, whether the bot token opened it)
        self.file_bytes_sent = 0  # bytes of user files written to a downloader
        self.shared_files: list[SharedFile] = []
        self.file_infos: dict[str, dict[str, Any]] = {}  # file id -> what files.info answers
        self._pending_uploads: dict[str, dict[str, Any]] = {}  # file id -> its getUploadURLExternal + bytes

        self._failures: dict[str, list[_PlannedFailure]] = {}
        self._tickets: set[str] = set()
        self._sockets: list[_Socket] = []
        self._changed = asyncio.Condition()
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> FakeSlack:
        app = web.Application()
        app.router.add_post("/api/{method}", self._web_api)
        app.router.add_get("/api/{method}", self._web_api)  # the SDK reads some methods (files.info) by GET
        app.router.add_get("/link/", self._socket_mode)
        app.router.add_get("/files-pri/{path:.+}", self._serve_file)
        app.router.add_post("/upload/v1/{file_id}", self._receive_upload)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        for sock in list(self._sockets):
            with contextlib.suppress(Exception):
                await sock.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def api_url(self) -> str:
        """What to give AsyncWebClient as base_url (the trailing slash matters: urljoin)."""
        return f"{self.base_url}api/"

    # -- test controls -------------------------------------------------------------------------

    def fail_next(
        self, method: str, count: int = 1, status: int = 500, retry_after: int | None = None
    ) -> None:
        """The next `count` calls of `method` fail with this HTTP status (429 carries Retry-After)."""
        planned = self._failures.setdefault(method, [])
        planned.extend(_PlannedFailure(status, retry_after) for _ in range(count))

    def rate_limit_next_post(self, retry_after: int = 1) -> None:
        """The next chat.postMessage gets 429 with Retry-After, like Slack's rate limiter."""
        self.fail_next("chat.postMessage", 1, 429, retry_after)

    def fail_next_posts(self, count: int = 1, status: int = 500) -> None:
        """The next `count` chat.postMessage calls fail with this HTTP status."""
        self.fail_next("chat.postMessage", count, status)

    async def request_refresh(self) -> None:
        """Ask the connected client to reconnect, as Slack does every few hours ("refresh_requested")."""
        sock = self._sockets[-1]
        await sock.ws.send_str(
            json.dumps({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake"}})
        )

    async def push_event(
        self, event: dict[str, Any], *, event_id: str | None = None, timeout: float = 5.0
    ) -> str:
        """Deliver an event over Socket Mode (waiting for a connected client); returns the envelope id."""
        sock = await self._wait_for(lambda: self._sockets[-1] if self._sockets else None, timeout)
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "type": "events_api",
            "payload": self.event_callback(event, event_id=event_id),
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await sock.ws.send_str(json.dumps(envelope))
        return envelope_id

    async def drop_sockets(self) -> None:
        """Kill every Socket Mode connection without a close handshake, as a network failure would."""
        for sock in list(self._sockets):
            transport = sock.request.transport
            if transport is not None:
                transport.abort()
            self._sockets.remove(sock)

    async def wait_for_posts(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        await self._wait_for(lambda: len(self.posts) >= n, timeout)
        return self.posts

    async def wait_for_connections(self, n: int, timeout: float = 5.0) -> None:
        await self._wait_for(lambda: self.connections >= n, timeout)

    async def wait_for_ack(self, envelope_id: str, timeout: float = 5.0) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            return next((a for a in self.acks if a.get("envelope_id") == envelope_id), None)

        ack: dict[str, Any] = await self._wait_for(find, timeout)
        return ack

    @property
    def open_sockets(self) -> int:
        """Socket Mode connections currently open on the fake's side."""
        return len(self._sockets)

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    # -- building events and signed requests ---------------------------------------------------

    def next_ts(self) -> str:
        """A fresh, increasing message timestamp in Slack's "seconds.micros" form."""
        return f"{int(time.time())}.{next(self._ts):06d}"

    def message_event(
        self,
        text: str,
        *,
        channel: str = "C0GENERAL",
        user: str = "U0ALICE",
        ts: str | None = None,
        thread_ts: str | None = None,
        channel_type: str = "channel",
        **extra: Any,
    ) -> dict[str, Any]:
        ts = ts or self.next_ts()
        event: dict[str, Any] = {
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": channel_type,
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        event.update(extra)
        return event

    def mention_event(
        self,
        text: str,
        *,
        channel: str = "C0GENERAL",
        user: str = "U0ALICE",
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        """An app_mention, as Slack sends it: the text starts with the bot's `<@U...>`."""
        ts = ts or self.next_ts()
        event: dict[str, Any] = {
            "type": "app_mention",
            "channel": channel,
            "user": user,
            "text": f"<@{self.bot_user_id}> {text}",
            "ts": ts,
            "event_ts": ts,
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def file_object(
        self,
        data: bytes,
        name: str,
        mimetype: str,
        *,
        filetype: str | None = None,
        declared_size: int | None = None,
        subtype: str | None = None,
    ) -> dict[str, Any]:
        """A file as a `message` event's `files` lists it (hosted here until the test ends).
        `subtype="slack_audio"` makes it a voice clip recorded in Slack."""
        file_id = f"F{uuid.uuid4().hex[:10].upper()}"
        path = f"{self.team_id}-{file_id}/download/{name}"
        self.hosted[path] = self.hosted[f"{self.team_id}-{file_id}/{name}"] = (name, data)  # both URLs
        item: dict[str, Any] = {
            "id": file_id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype or name.rpartition(".")[2],
            "user": "U0ALICE",
            "size": len(data) if declared_size is None else declared_size,
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "url_private": f"{self.base_url}files-pri/{self.team_id}-{file_id}/{name}",
            "url_private_download": f"{self.base_url}files-pri/{path}",
            "permalink": f"https://fake.slack.com/files/U0ALICE/{file_id}/{name}",
        }
        if subtype:
            item["subtype"] = subtype
        self.file_infos[file_id] = item
        return item

    def connect_stub(self, item: dict[str, Any]) -> dict[str, Any]:
        """The same file as a message shows it when it was shared from another organisation over
        Slack Connect: its id and nothing to fetch it by (files.info has the rest)."""
        return {
            "id": item["id"],
            "mode": "file_access",
            "file_access": "check_file_info",
            "created": 0,
            "timestamp": 0,
            "user": "",
        }

    def file_message_event(self, text: str, files: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """A message sharing files, as Slack sends it: subtype file_share, the files listed."""
        return self.message_event(text, subtype="file_share", files=files, upload=True, **fields)

    def event_callback(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """The outer Events API body around one event."""
        return {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "api_app_id": self.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }

    def signed_request(
        self,
        body: dict[str, Any] | bytes,
        *,
        timestamp: int | None = None,
        secret: str | None = None,
        retry_num: int | None = None,
    ) -> tuple[bytes, dict[str, str]]:
        """Body bytes and headers of an Events API POST, signed the way Slack signs it (v0 HMAC-SHA256)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        ts = str(int(time.time()) if timestamp is None else timestamp)
        base = b"v0:" + ts.encode() + b":" + raw
        digest = hmac.new((secret or self.signing_secret).encode(), base, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": f"v0={digest}",
        }
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        return raw, headers

    # -- the Web API ---------------------------------------------------------------------------

    async def _web_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        token = _bearer(request) or params.pop("token", None)
        call = ApiCall(method, params, token)
        self.calls.append(call)
        try:
            handler = self._methods().get(method)
            if handler is None:
                return _json({"ok": False, "error": "unknown_method"})
            wanted = self.app_token if method == "apps.connections.open" else self.bot_token
            if token is None:
                return _json({"ok": False, "error": "not_authed"})
            if token != wanted:
                return _json({"ok": False, "error": "invalid_auth"})
            planned = self._failures.get(method)
            if planned:
                response = _failure(planned.pop(0))
            else:
                response = await handler(params)
            call.status = response.status
            return response
        finally:
            await self._notify()

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[web.Response]]]:
        return {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.delete": self._delete,
            "apps.connections.open": self._connections_open,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "files.info": self._files_info,
        }

    async def _auth_test(self, params: dict[str, Any]) -> web.Response:
        return _json(
            {
                "ok": True,
                "url": "https://fake.slack.com/",
                "team": "Fake Team",
                "user": "agentd",
                "team_id": self.team_id,
                "user_id": self.bot_user_id,
                "bot_id": self.bot_id,
                "is_enterprise_install": False,
            },
            headers={"x-oauth-scopes": ",".join(self.scopes)},  # as Slack says what a token was granted
        )

    async def _post_message(self, params: dict[str, Any]) -> web.Response:
        if not params.get("channel"):
            return _json({"ok": False, "error": "channel_not_found"})
        if not params.get("text") and not params.get("blocks"):
            return _json({"ok": False, "error": "no_text"})
        ts = self.next_ts()
        self.posts.append(params)
        message = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "text": params.get("text", ""),
            "ts": ts,
            "team": self.team_id,
        }
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self.messages[ts] = {"channel": params["channel"], **message}
        return _json({"ok": True, "channel": params["channel"], "ts": ts, "message": message})

    async def _update(self, params: dict[str, Any]) -> web.Response:
        message = self.messages.get(str(params.get("ts")))
        if message is None or message["channel"] != params.get("channel"):
            return _json({"ok": False, "error": "message_not_found"})
        if not params.get("text") and not params.get("blocks"):
            return _json({"ok": False, "error": "no_text"})
        message["text"] = params.get("text", "")
        self.updates.append(params)
        return _json({"ok": True, "channel": params["channel"], "ts": params["ts"], "text": message["text"]})

    async def _delete(self, params: dict[str, Any]) -> web.Response:
        message = self.messages.get(str(params.get("ts")))
        if message is None or message["channel"] != params.get("channel"):
            return _json({"ok": False, "error": "message_not_found"})
        del self.messages[str(params["ts"])]
        self.deletes.append(params)
        return _json({"ok": True, "channel": params["channel"], "ts": params["ts"]})

    def visible(self, channel: str) -> list[str]:
        """What the bot's messages in a channel say now, oldest first (updates applied, deleted ones gone)."""
        return [m["text"] for m in self.messages.values() if m["channel"] == channel]

    # -- files ---------------------------------------------------------------------------------

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        authorised = _bearer(request) == self.bot_token
        self.downloads.append((path, authorised))
        await self._notify()
        if not authorised:
            # Slack answers an unauthenticated file URL with its sign-in page, status 200
            page = (
                "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"
            )
            return web.Response(text=page, content_type="text/html")
        hosted = self.hosted.get(path)
        if hosted is None:
            return web.Response(status=404, text="file not found")
        _name, data = hosted
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(data)
        await response.prepare(request)
        for start in range(0, len(data), 65536):
            piece = data[start : start + 65536]
            await response.write(piece)
            self.file_bytes_sent += len(piece)
        await response.write_eof()
        return response

    async def _files_info(self, params: dict[str, Any]) -> web.Response:
        item = self.file_infos.get(str(params.get("file")))
        if item is None:
            return _json({"ok": False, "error": "file_not_found"})
        return _json({"ok": True, "file": item, "comments": [], "response_metadata": {"next_cursor": ""}})

    async def _get_upload_url(self, params: dict[str, Any]) -> web.Response:
        filename, length = params.get("filename"), str(params.get("length", ""))
        if not filename or not length.isdigit():
            return _json({"ok": False, "error": "invalid_arguments"})
        file_id = f"F{uuid.uuid4().hex[:10].upper()}"
        self._pending_uploads[file_id] = {"filename": filename, "length": int(length), "data": None}
        return _json({"ok": True, "upload_url": f"{self.base_url}upload/v1/{file_id}", "file_id": file_id})

    async def _receive_upload(self, request: web.Request) -> web.Response:
        pending = self._pending_uploads.get(request.match_info["file_id"])
        if pending is None:
            return web.Response(status=404, text="upload url not found")
        pending["data"] = await request.read()
        return web.Response(text=f"OK - {len(pending['data'])}")

    async def _complete_upload(self, params: dict[str, Any]) -> web.Response:
        try:
            files = json.loads(params.get("files") or "[]")
        except ValueError:
            return _json({"ok": False, "error": "invalid_arguments"})
        done: list[dict[str, Any]] = []
        for item in files:
            pending = self._pending_uploads.get(str(item.get("id")))
            if pending is None or pending["data"] is None or len(pending["data"]) != pending["length"]:
                return _json({"ok": False, "error": "file_not_found"})  # never uploaded, or not all of it
            shared = SharedFile(
                id=str(item["id"]),
                filename=pending["filename"],
                title=item.get("title"),
                data=pending["data"],
                channel=params.get("channel_id"),
                thread_ts=params.get("thread_ts"),
                initial_comment=params.get("initial_comment"),
            )
            self.shared_files.append(shared)
            del self._pending_uploads[shared.id]
            done.append(
                {"id": shared.id, "name": shared.filename, "title": shared.title, "size": len(shared.data)}
            )
        return _json({"ok": True, "files": done})

    async def wait_for_shared(self, n: int, timeout: float = 5.0) -> list[SharedFile]:
        await self._wait_for(lambda: len(self.shared_files) >= n, timeout)
        return self.shared_files

    async def _connections_open(self, params: dict[str, Any]) -> web.Response:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        return _json({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}"})

    # -- Socket Mode -----------------------------------------------------------------------------

    async def _socket_mode(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # Slack's tickets are single use
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        sock = _Socket(ws, request, self.connections)
        self._sockets.append(sock)
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": len(self._sockets),
                    "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": self.app_id},
                }
            )
        )
        await self._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                with contextlib.suppress(ValueError):
                    data = json.loads(msg.data)
                    if isinstance(data, dict) and "envelope_id" in data:
                        sock.acks.append(data)
                        self.acks.append(data)
                        await self._notify()
        finally:
            if sock in self._sockets:
                self._sockets.remove(sock)
        return ws

    # -- waiting ---------------------------------------------------------------------------------

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _wait_for(self, check: Callable[[], Any], timeout: float) -> Any:
        async def wait() -> Any:
            async with self._changed:
                while not (result := check()):
                    await self._changed.wait()
                return result

        return await asyncio.wait_for(wait(), timeout)


async def _read_params(request: web.Request) -> dict[str, Any]:
    # The SDK sends some methods' arguments in the query string (chat.delete), others in the body.
    query: dict[str, Any] = dict(request.query)
    raw = await request.read()
    if not raw:
        return query
    if request.content_type == "application/json":
        data = json.loads(raw)
        return query | data if isinstance(data, dict) else query
    return query | dict(parse_qsl(raw.decode()))


def _bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def _failure(planned: _PlannedFailure) -> web.Response:
    if planned.status == 429:
        retry_after = str(planned.retry_after if planned.retry_after is not None else 1)
        return _json({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": retry_after})
    return _json({"ok": False, "error": "fatal_error"}, status=planned.status)


def _json(body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json; charset=utf-8", **(headers or {})},
    )
