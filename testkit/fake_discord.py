"""A fake Discord on 127.0.0.1: the real gateway (websocket) and the REST calls a bot makes.

discord.py runs unchanged against it once `discord.http.Route.BASE` points at
`api_base_url` and `DiscordWebSocket.DEFAULT_GATEWAY` at `gateway_url`
(`DiscordSpec.api_base_url` / `gateway_url` do exactly that).

What it speaks, as Discord does:
- gateway: HELLO, IDENTIFY -> READY + one GUILD_CREATE per guild, HEARTBEAT -> ACK,
  RESUME -> replay of what was missed + RESUMED (or INVALID_SESSION), dispatches with
  sequence numbers; close code 4004 for a refused token. Frames are plain JSON text
  (discord.py only decompresses binary frames, so zlib-stream need not be emulated).
- REST (JSON with the exact `Content-Type: application/json` discord.py insists on):
  users/@me, oauth2/applications/@me, gateway, gateway/bot, channel messages
  (with `enforce_nonce` de-duplication) and typing.
- Message content follows the MESSAGE_CONTENT intent: a client that did not ask for it
  gets empty content for guild messages that do not mention it.
- The bot's own messages come back over the gateway, as they do on Discord.
- Files: an injected message can carry `attachments` (`FakeFile`s; a voice message is one with a
  duration, flagged as Discord flags it), each at a signed CDN URL (`/attachments/...?ex=&is=&hm=`,
  which answers 404 when the signature is wrong, as the CDN does) that needs no token; the bot's
  uploads arrive as multipart (`payload_json` + `files[n]`), refused with 413 / code 40005 past
  `upload_limit` (10 MiB, a bot's limit in a server without boosts), and land in `SentMessage.files`.

Test controls: `user_message` / `dm` inject a message, `redeliver` sends one again,
`sent` records what the bot posted, `rate_limit_next_send` / `fail_next_send` /
`lose_next_send_response` disturb sends, `drop_connections` / `go_silent` disturb the
gateway, `refuse_token` makes the token invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

API_PREFIX = "/api/v10"
MESSAGE_CONTENT_INTENT = 1 << 15

# Gateway opcodes
DISPATCH, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HELLO, HEARTBEAT_ACK = (
    0,
    1,
    2,
    6,
    7,
    9,
    10,
    11,
)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class FakeUser:
    id: int
    name: str
    bot: bool = False

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "username": self.name,
            "global_name": self.name,
            "discriminator": "0",
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
        }


@dataclass
class FakeChannel:
    """A guild text channel (type 0), a public thread (type 11) or a DM (type 1)."""

    id: int
    name: str
    type: int
    guild_id: int | None = None
    parent_id: int | None = None
    owner_id: int | None = None
    recipient_id: int | None = None

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "type": self.type,
            "name": self.name,
            "last_message_id": None,
        }
        if self.guild_id is not None:
            data.update(guild_id=str(self.guild_id), position=0, permission_overwrites=[], nsfw=False)
            data.update(rate_limit_per_user=0, topic=None, flags=0)
        if self.type == 11:
            data.update(
                parent_id=str(self.parent_id),
                owner_id=str(self.owner_id),
                message_count=0,
                member_count=1,
                thread_metadata={
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": _now_iso(),
                    "locked": False,
                },
            )
        return data


@dataclass
class FakeGuild:
    id: int
    name: str
    channels: dict[int, FakeChannel] = field(default_factory=dict)

    def payload(self, members: list[FakeUser]) -> dict[str, Any]:
        everyone = {
            "id": str(self.id),
            "name": "@everyone",
            "permissions": "1071698660929",  # view, send, read history, send in threads ...
            "position": 0,
            "color": 0,
            "hoist": False,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        plain = [c.payload() for c in self.channels.values() if c.type != 11]
        threads = [c.payload() for c in self.channels.values() if c.type == 11]
        return {
            "id": str(self.id),
            "name": self.name,
            "icon": None,
            "owner_id": str(members[0].id),
            "roles": [everyone],
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": plain,
            "threads": threads,
            "members": [_member_payload(u) for u in members],
            "member_count": len(members),
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "large": False,
            "unavailable": False,
            "joined_at": _now_iso(),
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "premium_tier": 0,
            "system_channel_flags": 0,
            "preferred_locale": "en-US",
            "nsfw_level": 0,
        }


def _member_payload(user: FakeUser) -> dict[str, Any]:
    return {
        "user": user.payload(),
        "roles": [],
        "joined_at": _now_iso(),
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


UPLOAD_LIMIT = 10 * 1024 * 1024
IS_VOICE_MESSAGE = 1 << 13  # the message flag Discord sets on a voice message


@dataclass(frozen=True)
class FakeFile:
    """A file a person attaches (or the bot uploads): its name, type and bytes."""

    filename: str
    content_type: str | None
    data: bytes
    duration_secs: float | None = None  # set: a voice message
    declared_size: int | None = None  # the `size` the attachment states (default: the real one)


@dataclass
class SentMessage:
    """One message the bot created through `POST /channels/{id}/messages`."""

    id: int
    channel_id: int
    content: str
    nonce: str | None
    reference: dict[str, Any] | None
    allowed_mentions: dict[str, Any] | None
    body: dict[str, Any]
    deleted: bool = False  # `content` is always the latest edit
    files: list[FakeFile] = field(default_factory=list)  # the multipart `files[n]` parts, in order


@dataclass
class SendAttempt:
    """Every `POST /channels/{id}/messages`, whatever it answered (status 0: connection dropped)."""

    channel_id: int
    status: int
    at: float


@dataclass
class _Session:
    """A gateway session: survives a dropped socket so RESUME can replay what was missed."""

    id: str
    intents: int
    seq: int = 0
    backlog: list[dict[str, Any]] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None


class FakeDiscord:
    def __init__(
        self, *, token: str = "fake-discord-token", bot_name: str = "agentd-bot", heartbeat_ms: int = 500
    ):
        self.token = token
        self.heartbeat_ms = heartbeat_ms
        self._ids = itertools.count(1_200_000_000_000_000_000)
        self.bot = FakeUser(self.new_id(), bot_name, bot=True)
        self.users: dict[int, FakeUser] = {self.bot.id: self.bot}
        self.guilds: dict[int, FakeGuild] = {}
        self.channels: dict[int, FakeChannel] = {}
        self._dm_by_user: dict[int, int] = {}
        self._delivered: dict[int, dict[str, Any]] = {}  # message id -> MESSAGE_CREATE payload

        self.sent: list[SentMessage] = []
        self.edits: list[tuple[int, str]] = []  # (message id, new content), one per accepted PATCH
        self.deletes: list[int] = []  # message ids, one per accepted DELETE
        self.attempts: list[SendAttempt] = []
        self.typing: list[int] = []  # channel ids, one per typing call
        self.dms_opened: list[int] = []  # user ids, one per Create DM call
        self.upload_limit = UPLOAD_LIMIT
        self.cdn: dict[str, FakeFile] = {}  # CDN path -> the file it serves
        self.downloads: list[str] = []  # CDN paths fetched (with a good signature), in order
        self.file_bytes_sent = 0  # bytes of attachments written to a downloader
        self.identifies = 0
        self.resumes = 0
        self.token_refused = False

        self._sessions: dict[str, _Session] = {}
        self._sockets: set[web.WebSocketResponse] = set()
        self._send_faults: list[Callable[[], web.StreamResponse | None]] = []
        self._silent: set[web.WebSocketResponse] = set()  # sockets that went quiet
        self.disconnects = 0
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._gateway)
        app.router.add_get(API_PREFIX + "/users/@me", self._users_me)
        app.router.add_get(API_PREFIX + "/oauth2/applications/@me", self._application)
        app.router.add_get(API_PREFIX + "/gateway", self._gateway_info)
        app.router.add_get(API_PREFIX + "/gateway/bot", self._gateway_info)
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/messages", self._create_message)
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/typing", self._typing)
        app.router.add_post(API_PREFIX + "/users/@me/channels", self._open_dm)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._serve_attachment)
        message = API_PREFIX + "/channels/{channel_id}/messages/{message_id}"
        app.router.add_patch(message, self._edit_message)
        app.router.add_delete(message, self._delete_message)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        for ws in list(self._sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    # ---- world building --------------------------------------------------------------------

    def new_id(self) -> int:
        return next(self._ids)

    def add_user(self, name: str, *, bot: bool = False) -> int:
        user = FakeUser(self.new_id(), name, bot=bot)
        self.users[user.id] = user
        return user.id

    def add_guild(self, name: str = "guild") -> int:
        guild = FakeGuild(self.new_id(), name)
        self.guilds[guild.id] = guild
        return guild.id

    def add_text_channel(self, guild_id: int, name: str = "general") -> int:
        channel = FakeChannel(self.new_id(), name, type=0, guild_id=guild_id)
        self._add_channel(channel)
        return channel.id

    async def add_thread(self, parent_id: int, name: str = "thread") -> int:
        """A public thread under a text channel; a connected bot hears THREAD_CREATE."""
        parent = self.channels[parent_id]
        thread = FakeChannel(
            self.new_id(), name, type=11, guild_id=parent.guild_id, parent_id=parent_id, owner_id=self.bot.id
        )
        self._add_channel(thread)
        await self._dispatch("THREAD_CREATE", {**thread.payload(), "newly_created": True})
        return thread.id

    def dm_channel_id(self, user_id: int) -> int:
        if user_id not in self._dm_by_user:
            channel = FakeChannel(self.new_id(), "", type=1, recipient_id=user_id)
            self.channels[channel.id] = channel
            self._dm_by_user[user_id] = channel.id
        return self._dm_by_user[user_id]

    def _add_channel(self, channel: FakeChannel) -> None:
        assert channel.guild_id is not None
        self.guilds[channel.guild_id].channels[channel.id] = channel
        self.channels[channel.id] = channel

    # ---- injecting messages ----------------------------------------------------------------

    async def user_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        mention_bot: bool = False,
        attachments: Sequence[FakeFile] = (),
    ) -> int:
        """A message from `author_id` in a guild channel or thread; returns its message id.

        With mention_bot the content starts with `<@bot_id> ` and the bot is in `mentions`.
        """
        channel = self.channels[channel_id]
        if mention_bot:
            content = f"<@{self.bot.id}> {content}"
        mentions = [self.bot] if mention_bot else []
        return await self._deliver(channel, self.users[author_id], content, mentions, list(attachments))

    async def dm(self, author_id: int, content: str, *, attachments: Sequence[FakeFile] = ()) -> int:
        """A direct message from `author_id` to the bot; returns its message id."""
        channel = self.channels[self.dm_channel_id(author_id)]
        return await self._deliver(channel, self.users[author_id], content, [], list(attachments))

    async def redeliver(self, message_id: int) -> None:
        """Send the same MESSAGE_CREATE again (Discord can deliver an event twice)."""
        await self._dispatch("MESSAGE_CREATE", self._delivered[message_id])

    async def _deliver(
        self,
        channel: FakeChannel,
        author: FakeUser,
        content: str,
        mentions: list[FakeUser],
        files: list[FakeFile] | None = None,
    ) -> int:
        extra: dict[str, Any] = {}
        if files:
            extra["attachments"] = [self._host_attachment(channel.id, f) for f in files]
            if any(f.duration_secs is not None for f in files):
                extra["flags"] = IS_VOICE_MESSAGE
        payload = self._message_payload(self.new_id(), channel, author, content, mentions, extra)
        self._delivered[int(payload["id"])] = payload
        await self._dispatch("MESSAGE_CREATE", payload)
        return int(payload["id"])

    def _message_payload(
        self,
        message_id: int,
        channel: FakeChannel,
        author: FakeUser,
        content: str,
        mentions: list[FakeUser],
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(message_id),
            "channel_id": str(channel.id),
            "author": author.payload(),
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [u.payload() for u in mentions],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "components": [],
        }
        if channel.guild_id is not None:
            data["guild_id"] = str(channel.guild_id)
            data["member"] = {k: v for k, v in _member_payload(author).items() if k != "user"}
        data.update(extra or {})
        return data

    def _host_attachment(self, channel_id: int, file: FakeFile) -> dict[str, Any]:
        """Put a file on the fake CDN; its attachment object, as a message carries it."""
        attachment_id = self.new_id()
        path = f"/attachments/{channel_id}/{attachment_id}/{file.filename}"
        self.cdn[path] = file
        expires = f"{int(time.time()) + 86400:x}"
        url = (
            f"http://127.0.0.1:{self.port}{path}?ex={expires}&is={int(time.time()):x}&hm={_signature(path)}&"
        )
        data: dict[str, Any] = {
            "id": str(attachment_id),
            "filename": file.filename,
            "size": len(file.data) if file.declared_size is None else file.declared_size,
            "url": url,
            "proxy_url": url.replace("/attachments/", "/media-proxy/attachments/"),
        }
        if file.content_type is not None:
            data["content_type"] = file.content_type
        if file.duration_secs is not None:
            data |= {"duration_secs": file.duration_secs, "waveform": "AAAAAAAAAAAA", "flags": 0}
        return data

    async def _serve_attachment(self, request: web.Request) -> web.StreamResponse:
        file = self.cdn.get(request.path)
        try:  # a signed URL lasts ~24 h (`ex`, hex epoch seconds), then 404s
            expired = int(request.query.get("ex", ""), 16) < time.time()
        except ValueError:
            expired = True
        if file is None or expired or request.query.get("hm") != _signature(request.path):
            return web.Response(status=404, text="This content is no longer available.")
        self.downloads.append(request.path)
        response = web.StreamResponse(
            headers={"Content-Type": file.content_type or "application/octet-stream"}
        )
        response.content_length = len(file.data)
        await response.prepare(request)
        for start in range(0, len(file.data), 65536):
            piece = file.data[start : start + 65536]
            await response.write(piece)
            self.file_bytes_sent += len(piece)
        await response.write_eof()
        return response

    # ---- disturbing the bot ----------------------------------------------------------------

    def rate_limit_next_send(self, retry_after: float, *, is_global: bool = False) -> None:
        """The next message create answers 429 with this retry_after (as Discord's edge does)."""

        def fault() -> web.StreamResponse:
            body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": is_global}
            headers = {
                "Retry-After": str(max(1, round(retry_after))),
                "Via": "1.1 google",  # discord.py treats a 429 without Via as a Cloudflare ban
                "X-RateLimit-Scope": "user",
            }
            return _json(body, status=429, headers=headers)

        self._send_faults.append(fault)

    def fail_next_send(self, status: int = 503, times: int = 1) -> None:
        """The next `times` message creates answer `status` with a Discord error body."""
        for _ in range(times):
            self._send_faults.append(
                lambda: _json({"message": f"fake error {status}", "code": 0}, status=status)
            )

    def lose_next_send_response(self) -> None:
        """The next message create is stored, but the connection drops before the answer."""
        self._send_faults.append(lambda: None)

    async def drop_connections(self, *, code: int = 4000, abrupt: bool = False) -> None:
        """Close every gateway socket (with a close frame, or by cutting the TCP connection)."""
        for ws in list(self._sockets):
            if abrupt:
                transport = ws._req.transport if ws._req is not None else None
                if transport is not None:
                    transport.abort()
            else:
                await ws.close(code=code, message=b"fake drop")

    def go_silent(self) -> None:
        """The open sockets stop answering heartbeats and carrying events: open, but dead.

        Connections made afterwards work again, so a client that notices and reconnects recovers.
        """
        self._silent |= self._sockets

    def refuse_token(self, refused: bool = True) -> None:
        """REST answers 401 and IDENTIFY is closed with 4004, as for a revoked token."""
        self.token_refused = refused

    # ---- waiting for the bot ---------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async def _wait() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        await asyncio.wait_for(_wait(), timeout)

    async def wait_for_sent(self, n: int, timeout: float = 5.0) -> list[SentMessage]:
        await self.wait_for(lambda: len(self.sent) >= n, timeout)
        return self.sent

    def connected(self) -> int:
        """How many gateway sockets are open and identified or resumed."""
        return sum(1 for s in self._sessions.values() if s.ws is not None and not s.ws.closed)

    async def _changed_now(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ---- gateway ---------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.add(ws)
        session: _Session | None = None
        try:
            await ws.send_str(json.dumps({"op": HELLO, "d": {"heartbeat_interval": self.heartbeat_ms}}))
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op, data = frame.get("op"), frame.get("d")
                if op == HEARTBEAT:
                    if ws not in self._silent:
                        await ws.send_str(json.dumps({"op": HEARTBEAT_ACK}))
                elif op == IDENTIFY:
                    session = await self._identify(ws, data)
                elif op == RESUME:
                    session = await self._resume(ws, data)
        finally:
            self._sockets.discard(ws)
            self._silent.discard(ws)
            self.disconnects += 1
            if session is not None and session.ws is ws:
                session.ws = None
            await self._changed_now()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> _Session | None:
        if self.token_refused or data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return None
        session = _Session(id=f"session-{self.new_id()}", intents=int(data.get("intents", 0)))
        self._sessions[session.id] = session
        session.ws = ws
        self.identifies += 1
        ready = {
            "v": 10,
            "user": {**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
            "session_id": session.id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(self.bot.id), "flags": 0},
            "private_channels": [],
            "relationships": [],
        }
        await self._send_event(session, "READY", ready)
        members = [u for u in self.users.values() if u.id != self.bot.id] + [self.bot]
        for guild in self.guilds.values():
            await self._send_event(session, "GUILD_CREATE", guild.payload(members))
        await self._changed_now()
        return session

    async def _resume(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> _Session | None:
        if self.token_refused or data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return None
        session = self._sessions.get(str(data.get("session_id")))
        if session is None:
            # discord.py then waits 5 s before it identifies again, as Discord asks
            await ws.send_str(json.dumps({"op": INVALID_SESSION, "d": False}))
            return None
        session.ws = ws
        self.resumes += 1
        last_seen = int(data.get("seq") or 0)
        for frame in [f for f in session.backlog if f["s"] > last_seen]:
            await ws.send_str(json.dumps(frame))
        await self._send_event(session, "RESUMED", {})
        await self._changed_now()
        return session

    async def _send_event(self, session: _Session, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        frame = {"op": DISPATCH, "t": event, "s": session.seq, "d": data}
        session.backlog.append(frame)
        del session.backlog[:-500]
        if session.ws is not None and not session.ws.closed and session.ws not in self._silent:
            with contextlib.suppress(ConnectionError):
                await session.ws.send_str(json.dumps(frame))

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send an event to every session (missed ones are replayed on RESUME)."""
        for session in list(self._sessions.values()):
            payload = data
            if event == "MESSAGE_CREATE":
                payload = self._as_seen_by(session, data)
            await self._send_event(session, event, payload)

    def _as_seen_by(self, session: _Session, data: dict[str, Any]) -> dict[str, Any]:
        """Without the MESSAGE_CONTENT intent, guild messages not addressed to the bot arrive empty."""
        if session.intents & MESSAGE_CONTENT_INTENT or "guild_id" not in data:
            return data
        addressed = any(m["id"] == str(self.bot.id) for m in data["mentions"])
        if addressed or data["author"]["id"] == str(self.bot.id):
            return data
        return {**data, "content": "", "embeds": [], "attachments": [], "components": []}

    # ---- REST ------------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return not self.token_refused and request.headers.get("Authorization") == f"Bot {self.token}"

    async def _users_me(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        return _json({**self.bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        owner = next((u for u in self.users.values() if not u.bot), self.bot)
        return _json(
            {
                "id": str(self.bot.id),
                "name": self.bot.name,
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": owner.payload(),
                "verify_key": "0" * 64,
                "flags": 0,
                "summary": "",
            }
        )

    async def _gateway_info(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = {"url": self.gateway_url.rstrip("/")}
        if request.path.endswith("/bot"):
            if not self._authorized(request):
                return _json({"message": "401: Unauthorized", "code": 0}, status=401)
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            body.update(shards=1, session_start_limit=limit)
        return _json(body)

    async def _open_dm(self, request: web.Request) -> web.StreamResponse:
        """Create DM: the bot's DM channel with a user (the same one each time), as Discord answers it."""
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        user_id = int((await request.json())["recipient_id"])
        if user_id not in self.users:
            return _json({"message": "Unknown User", "code": 10013}, status=404)
        channel = self.channels[self.dm_channel_id(user_id)]
        self.dms_opened.append(user_id)
        return _json({**channel.payload(), "recipients": [self.users[user_id].payload()]})

    async def _typing(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        self.typing.append(int(request.match_info["channel_id"]))
        await self._changed_now()
        return web.Response(status=204)

    async def _create_message(self, request: web.Request) -> web.StreamResponse:
        channel_id = int(request.match_info["channel_id"])
        if not self._authorized(request):
            return await self._attempt(
                channel_id, _json({"message": "401: Unauthorized", "code": 0}, status=401)
            )
        channel = self.channels.get(channel_id)
        if channel is None:
            return await self._attempt(
                channel_id, _json({"message": "Unknown Channel", "code": 10003}, status=404)
            )
        body, files = await _message_body(request)
        if any(len(f.data) > self.upload_limit for f in files):
            refused = _json({"message": "Request entity too large", "code": 40005}, status=413)
            return await self._attempt(channel_id, refused)
        lose_response = False
        if self._send_faults:
            response = self._send_faults.pop(0)()
            if response is not None:
                return await self._attempt(channel_id, response)
            lose_response = True  # lose_next_send_response: stored, but the caller never hears back
        message, created = self._store_sent(channel, body, files)
        if lose_response:
            self.attempts.append(SendAttempt(channel_id, 0, time.monotonic()))
            await self._changed_now()
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=500)
        if created:
            await self._dispatch("MESSAGE_CREATE", message)
        return await self._attempt(channel_id, _json(message))

    def _store_sent(
        self, channel: FakeChannel, body: dict[str, Any], files: list[FakeFile] | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Record a bot message; a repeated `enforce_nonce` nonce returns the first one (Discord's dedupe)."""
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            for sent in self.sent:
                if sent.channel_id == channel.id and sent.nonce == str(nonce):
                    return self._message_payload(sent.id, channel, self.bot, sent.content, []), False
        reference = body.get("message_reference")
        sent = SentMessage(
            id=self.new_id(),
            channel_id=channel.id,
            content=str(body.get("content") or ""),
            nonce=None if nonce is None else str(nonce),
            reference=reference,
            allowed_mentions=body.get("allowed_mentions"),
            body=body,
            files=list(files or []),
        )
        self.sent.append(sent)
        extra: dict[str, Any] = {"nonce": sent.nonce} if sent.nonce is not None else {}
        if sent.files:
            extra["attachments"] = [self._host_attachment(channel.id, f) for f in sent.files]
        if reference:
            extra["message_reference"] = reference
        return self._message_payload(sent.id, channel, self.bot, sent.content, [], extra), True

    def visible(self, channel_id: int) -> list[str]:
        """What the bot's messages in a channel say now, oldest first (edits applied, deleted ones gone)."""
        return [m.content for m in self.sent if m.channel_id == channel_id and not m.deleted]

    def _own_message(self, request: web.Request) -> SentMessage | web.Response:
        """The bot's message a PATCH or DELETE names, or the error Discord would answer."""
        if not self._authorized(request):
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        channel_id, message_id = int(request.match_info["channel_id"]), int(request.match_info["message_id"])
        for sent in self.sent:
            if sent.id == message_id and sent.channel_id == channel_id and not sent.deleted:
                return sent
        return _json({"message": "Unknown Message", "code": 10008}, status=404)

    async def _edit_message(self, request: web.Request) -> web.StreamResponse:
        sent = self._own_message(request)
        if isinstance(sent, web.Response):
            return sent
        body = await request.json()
        sent.content = str(body.get("content") or "")
        self.edits.append((sent.id, sent.content))
        await self._changed_now()
        channel = self.channels[sent.channel_id]
        edited = {"edited_timestamp": _now_iso()}
        return _json(self._message_payload(sent.id, channel, self.bot, sent.content, [], edited))

    async def _delete_message(self, request: web.Request) -> web.StreamResponse:
        sent = self._own_message(request)
        if isinstance(sent, web.Response):
            return sent
        sent.deleted = True
        self.deletes.append(sent.id)
        await self._changed_now()
        return web.Response(status=204)

    async def _attempt(self, channel_id: int, response: web.StreamResponse) -> web.StreamResponse:
        self.attempts.append(SendAttempt(channel_id, response.status, time.monotonic()))
        await self._changed_now()
        return response


def _signature(path: str) -> str:
    return hashlib.sha256(b"fake-cdn:" + path.encode()).hexdigest()[:32]


async def _message_body(request: web.Request) -> tuple[dict[str, Any], list[FakeFile]]:
    """A message create's JSON, and its files when it came as multipart (`payload_json` + `files[n]`)."""
    if request.content_type != "multipart/form-data":
        return await request.json(), []
    body: dict[str, Any] = {}
    files: list[FakeFile] = []
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "payload_json":
            body = json.loads(await part.read())
        elif part.name and part.name.startswith("files["):
            data = bytes(await part.read())
            files.append(FakeFile(part.filename or "file", part.headers.get("Content-Type"), data))
    return body, files


def _json(obj: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py compares Content-Type with "application/json" exactly: no charset suffix.
    return web.Response(
        body=json.dumps(obj).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
