"""A fake Telegram Bot API on 127.0.0.1 for channel tests.

It speaks the real wire protocol, so python-telegram-bot runs unmodified
against it: ``POST /bot<token>/<method>`` with a form (or JSON) body, replies
``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description"}``,
and ``getUpdates`` long-polls and drops updates below ``offset``.

Tests inject messages (private, group, forum topic), read what the bot sent,
and schedule faults: a dropped connection, a 5xx, a 429 with ``retry_after``.
Files work as the Bot API documents them: `file_update` sends a photo (in
several sizes), a document, a voice note or an audio; ``getFile`` gives a
``file_path`` (or "file is too big" past the 20 MB bots may download), and
``GET /file/bot<token>/<file_path>`` serves the bytes (`downloads` records
each); ``sendPhoto`` / ``sendDocument`` take a multipart upload (`uploads`).
A request carrying any other token gets 401 Unauthorized, as Telegram does.
Start and stop it inside the running loop (``async with FakeTelegram() as fake``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import itertools
import json
import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from aiohttp import web
from PIL import Image

FaultKind = Literal["drop", "502", "500", "429", "migrate"]
FileKind = Literal["photo", "document", "voice", "audio", "video", "video_note"]

# Values PTB sends as plain strings; everything else in a form body is a JSON string.
_STRING_FIELDS = frozenset({"text", "url", "secret_token", "action", "parse_mode", "caption", "ip_address"})
_COMMAND_RE = re.compile(r"^/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?")
_MENTION_RE = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{3,32}")


DOWNLOAD_LIMIT = 20 * 1024 * 1024  # getFile refuses bots files larger than this
PHOTO_SIZES = ((90, 67), (320, 240), (800, 600))  # Telegram's thumbnails of a photo, smallest first


@dataclass(frozen=True)
class _StoredFile:
    file_id: str
    unique_id: str
    path: str
    data: bytes


@dataclass(frozen=True)
class Upload:
    """One file the bot sent: the method, the chat, and the multipart part as it arrived."""

    method: str
    chat_id: int
    filename: str | None
    content_type: str | None
    data: bytes
    params: dict[str, Any]


@dataclass(frozen=True)
class Call:
    method: str
    params: dict[str, Any]


class _Refused(Exception):
    """A Bot API method refusing the call with a 400 and this description."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


@dataclass(frozen=True)
class _Fault:
    kind: FaultKind
    retry_after: int = 1
    migrate_to: int = 0


class FakeTelegram:
    """One bot's view of the Bot API; see the module docstring."""

    def __init__(
        self,
        token: str = "123456789:AAE-fake-token-for-tests",
        *,
        bot_id: int = 123456789,
        username: str = "agentd_test_bot",
    ) -> None:
        self.token = token
        self.bot_id = bot_id
        self.username = username
        self.calls: list[Call] = []
        self.sent: list[dict[str, Any]] = []  # sendMessage calls that succeeded, in order
        self.edits: list[dict[str, Any]] = []  # editMessageText calls that succeeded, in order
        self.deletes: list[dict[str, Any]] = []  # deleteMessage calls that succeeded, in order
        self.messages: dict[tuple[int, int], str] = {}  # (chat id, message id) -> the bot's text now
        self.webhook: dict[str, Any] | None = None  # the last setWebhook, cleared by deleteWebhook
        self.commands: list[dict[str, Any]] = []
        self.files: dict[str, _StoredFile] = {}  # file_id -> what getFile and the file URL serve
        self.downloads: list[str] = []  # file paths served by GET /file/bot<token>/..., in order
        self.uploads: list[Upload] = []  # files the bot sent (sendPhoto, sendDocument), in order
        self.file_bytes_sent = 0  # bytes of file bodies written to the bot (a refused download sends none)
        self._updates: list[dict[str, Any]] = []
        self._faults: dict[str, deque[_Fault]] = defaultdict(deque)
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(100)
        self._wake_pollers = asyncio.Event()
        self._call_arrived = asyncio.Event()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._serve_file)
        # a short shutdown timeout: a held long poll must not delay stop()
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self._closing = True
        self._wake_pollers.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def api_base_url(self) -> str:
        """The server root; the Bot API lives under ``/bot<token>/`` below it."""
        return f"http://127.0.0.1:{self.port}"

    # -- building and delivering updates -------------------------------------------------------

    def user(self, user_id: int) -> dict[str, Any]:
        return {"id": user_id, "is_bot": False, "first_name": f"User{user_id}", "username": f"user{user_id}"}

    def bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "agentd test", "username": self.username}

    def message_update(
        self,
        text: str,
        *,
        user_id: int,
        chat_id: int | None = None,
        chat_type: Literal["private", "group", "supergroup"] = "private",
        thread_id: int | None = None,
        topic_creator_id: int | None = None,
        reply_to_bot: bool = False,
        message_id: int | None = None,
    ) -> dict[str, Any]:
        """An Update carrying a text message, shaped like Telegram's (entities included).

        ``thread_id`` makes it a forum topic message; Telegram then sets
        ``reply_to_message`` to the topic's creation message (sent by
        ``topic_creator_id``) unless the message replies to something else.
        """
        chat: dict[str, Any]
        if chat_type == "private":
            chat = {"id": user_id, "type": "private", "first_name": f"User{user_id}"}
        else:
            if chat_id is None:
                raise ValueError("group messages need a chat_id")
            chat = {"id": chat_id, "type": chat_type, "title": f"Group {chat_id}"}
            if thread_id is not None:
                chat["is_forum"] = True
        message: dict[str, Any] = {
            "message_id": message_id if message_id is not None else next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": self.user(user_id),
            "text": text,
        }
        entities = _entities(text)
        if entities:
            message["entities"] = entities
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
            creator = self.user(topic_creator_id or user_id)
            if topic_creator_id == self.bot_id:
                creator = self.bot_user()
            message["reply_to_message"] = {
                "message_id": thread_id,
                "message_thread_id": thread_id,
                "date": int(time.time()) - 60,
                "chat": chat,
                "from": creator,
                "forum_topic_created": {"name": f"topic {thread_id}", "icon_color": 7322096},
            }
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": next(self._message_ids),
                "date": int(time.time()) - 10,
                "chat": chat,
                "from": self.bot_user(),
                "text": "an earlier answer",
                **({"message_thread_id": thread_id} if thread_id is not None else {}),
            }
        return {"update_id": next(self._update_ids), "message": message}

    def file_update(
        self,
        kind: FileKind,
        data: bytes,
        *,
        user_id: int,
        caption: str | None = None,
        mime_type: str | None = None,
        filename: str | None = None,
        declared_size: int | None = None,
        media_group_id: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """An Update carrying a file (and its caption), as Telegram sends one; `send_text`'s other fields
        apply. `declared_size` is the file_size the message states (default: the real one);
        `media_group_id` makes it one part of an album (Telegram sends each part as its own update)."""
        update = self.message_update(caption or "", user_id=user_id, **fields)
        message = update["message"]
        if media_group_id is not None:
            message["media_group_id"] = media_group_id
        del message["text"]
        message.pop("entities", None)
        if caption:
            message["caption"] = caption
            if entities := _entities(caption):
                message["caption_entities"] = entities
        size = len(data) if declared_size is None else declared_size
        if kind == "photo":
            # every size is a file of its own; only the largest holds the bytes sent
            sizes = []
            for width, height in PHOTO_SIZES:
                stored = self.store_file(
                    data if (width, height) == PHOTO_SIZES[-1] else data[:64], "photos", ".jpg"
                )
                sizes.append(
                    _file_fields(stored, size if (width, height) == PHOTO_SIZES[-1] else len(stored.data))
                )
                sizes[-1] |= {"width": width, "height": height}
            message["photo"] = sizes
            return update
        folder, ext = {
            "document": ("documents", ""),
            "voice": ("voice", ".oga"),
            "audio": ("music", ".mp3"),
            "video": ("videos", ".mp4"),
            "video_note": ("video_notes", ".mp4"),
        }[kind]
        stored = self.store_file(data, folder, ext)
        media = _file_fields(stored, size)
        if mime_type is not None:
            media["mime_type"] = mime_type
        if filename is not None and kind not in ("voice", "video_note"):
            media["file_name"] = filename
        if kind in ("voice", "audio", "video", "video_note"):
            media["duration"] = 3
        if kind == "video":
            media |= {"width": 640, "height": 360}
        if kind == "video_note":
            media["length"] = 240
        message[kind] = media
        return update

    def send_file(self, kind: FileKind, data: bytes, **fields: Any) -> dict[str, Any]:
        """Build a file update (see `file_update`) and queue it for getUpdates."""
        return self.inject(self.file_update(kind, data, **fields))

    def store_file(self, data: bytes, folder: str, ext: str) -> _StoredFile:
        n = next(self._message_ids)
        stored = _StoredFile(f"AgAC-file-{n}", f"AQAD-{n}", f"{folder}/file_{n}{ext}", data)
        self.files[stored.file_id] = stored
        return stored

    def inject(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for the next getUpdates (waking a held long poll)."""
        self._updates.append(update)
        self._wake_pollers.set()
        return update

    def send_text(self, text: str, **fields: Any) -> dict[str, Any]:
        """Build a message update (see `message_update`) and queue it for getUpdates."""
        return self.inject(self.message_update(text, **fields))

    def redeliver(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue the same message again under a new update_id, as Telegram does after a lost confirmation."""
        again = copy.deepcopy(update)
        again["update_id"] = next(self._update_ids)
        return self.inject(again)

    async def deliver_webhook(
        self, update: dict[str, Any], *, secret_token: str | None = None
    ) -> httpx.Response:
        """POST an update to the registered webhook with its secret header, as Telegram would."""
        if self.webhook is None:
            raise AssertionError("no webhook registered (setWebhook was not called)")
        secret = secret_token if secret_token is not None else self.webhook.get("secret_token")
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {}
        async with httpx.AsyncClient(timeout=5.0) as client:
            return await client.post(self.webhook["url"], json=update, headers=headers)

    # -- faults ----------------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        times: int = 1,
        *,
        how: FaultKind = "drop",
        retry_after: int = 1,
        migrate_to: int = 0,
    ) -> None:
        """Make the next `times` calls of `method` fail.

        ``drop`` closes the connection without a response; ``502``/``500`` answer
        with that status; ``429`` answers Too Many Requests with
        ``parameters.retry_after``; ``migrate`` answers 400 with
        ``parameters.migrate_to_chat_id``, as for a group upgraded to the
        supergroup `migrate_to`. A held getUpdates long poll fails at once.
        """
        for _ in range(times):
            self._faults[method].append(_Fault(how, retry_after, migrate_to))
        if method == "getUpdates":
            self._wake_pollers.set()

    def revoke_token(self) -> None:
        """Refuse the current token from now on (401), as after /revoke in BotFather; a held poll is answered too."""
        self.token = self.token + "-revoked"
        self._wake_pollers.set()

    # -- what the bot did --------------------------------------------------------------------

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        return [call.params for call in self.calls if call.method == method]

    async def wait_for_calls(self, method: str, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        await self._wait(lambda: len(self.calls_to(method)) >= n, timeout)
        return self.calls_to(method)

    async def wait_for_sent(self, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        await self._wait(lambda: len(self.sent) >= n, timeout)
        return self.sent

    async def _wait(self, condition: Any, timeout: float) -> None:
        async def _until() -> None:
            while not condition():
                self._call_arrived.clear()
                await self._call_arrived.wait()

        await asyncio.wait_for(_until(), timeout)

    # -- the server ------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await _read_params(request)
        self.calls.append(Call(method, params))
        self._call_arrived.set()
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        fault = self._next_fault(method)
        if fault is not None:
            return _fault_response(request, fault)
        if method == "getUpdates":
            return await self._get_updates(request, params)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        try:
            result = handler(params)
        except _Refused as refused:
            return _error(400, refused.description)
        self._call_arrived.set()
        return _ok(result)

    def _next_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        return queue.popleft() if queue else None

    async def _get_updates(self, request: web.Request, params: dict[str, Any]) -> web.StreamResponse:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        limit = int(params.get("limit") or 100)
        self._updates = [u for u in self._updates if u["update_id"] >= offset]  # below offset = confirmed
        if not self._updates and timeout and not self._closing:
            self._wake_pollers.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake_pollers.wait(), timeout)
            fault = self._next_fault("getUpdates")
            if fault is not None:
                return _fault_response(request, fault)
            if request.match_info["token"] != self.token:
                return _error(401, "Unauthorized")
        return _ok(self._updates[:limit])

    def _api_getFile(self, params: dict[str, Any]) -> dict[str, Any]:
        stored = self.files.get(str(params.get("file_id")))
        if stored is None:
            raise _Refused("Bad Request: invalid file_id")
        if len(stored.data) > DOWNLOAD_LIMIT:
            raise _Refused("Bad Request: file is too big")
        return _file_fields(stored, len(stored.data)) | {"file_path": stored.path}

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        stored = next((f for f in self.files.values() if f.path == request.match_info["path"]), None)
        if stored is None:
            return _error(404, "Not Found")
        self.downloads.append(stored.path)
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = len(stored.data)
        await response.prepare(request)
        for start in range(0, len(stored.data), 65536):  # in pieces, as a large file is: a reader may stop
            piece = stored.data[start : start + 65536]
            await response.write(piece)
            self.file_bytes_sent += len(piece)
        await response.write_eof()
        return response

    def _api_sendPhoto(self, params: dict[str, Any]) -> dict[str, Any]:
        part = params.get("photo")
        if isinstance(part, web.FileField):
            # Telegram shows a photo only when it can read it, its sides sum to at most 10000 and
            # neither is more than 20 times the other; it refuses the rest (a document takes any file)
            try:
                with Image.open(io.BytesIO(part.file.read())) as image:
                    width, height = image.size
            except (OSError, Image.DecompressionBombError):
                raise _Refused("Bad Request: IMAGE_PROCESS_FAILED") from None
            finally:
                part.file.seek(0)
            if width + height > 10000 or max(width, height) > 20 * min(width, height):
                raise _Refused("Bad Request: PHOTO_INVALID_DIMENSIONS")
        upload = self._take_upload("sendPhoto", "photo", params)
        message = self._bot_message(upload.chat_id, params)
        stored = self.store_file(upload.data, "photos", ".jpg")
        message["photo"] = [_file_fields(stored, len(upload.data)) | {"width": 800, "height": 600}]
        return message

    def _api_sendDocument(self, params: dict[str, Any]) -> dict[str, Any]:
        upload = self._take_upload("sendDocument", "document", params)
        message = self._bot_message(upload.chat_id, params)
        stored = self.store_file(upload.data, "documents", "")
        message["document"] = _file_fields(stored, len(upload.data)) | {
            "file_name": upload.filename or "file"
        }
        return message

    def _take_upload(self, method: str, field: str, params: dict[str, Any]) -> Upload:
        part = params.get(field)
        if not isinstance(part, web.FileField):
            raise _Refused(f"Bad Request: there is no {field} in the request")
        data = part.file.read()
        if not data:
            raise _Refused("Bad Request: file must be non-empty")
        upload = Upload(method, int(params["chat_id"]), part.filename, part.content_type, data, params)
        self.uploads.append(upload)
        return upload

    def _bot_message(self, chat_id: int, params: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": self.bot_user(),
        }
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = True
        return message

    def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            **self.bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(params)
        chat_id = int(params["chat_id"])
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": self.bot_user(),
            "text": params.get("text", ""),
        }
        self.messages[(chat_id, message["message_id"])] = str(params.get("text", "")).strip()
        if params.get("message_thread_id") is not None:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = True
        return message

    def visible(self, chat_id: int) -> list[str]:
        """What the bot's messages in a chat say now, oldest first (edits applied, deleted ones gone)."""
        return [text for (chat, _), text in self.messages.items() if chat == chat_id]

    def _api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        where = (int(params["chat_id"]), int(params["message_id"]))
        if where not in self.messages:
            raise _Refused("Bad Request: message to edit not found")
        text = str(params.get("text", "")).strip()  # Telegram keeps text without surrounding space
        if text == self.messages[where]:
            raise _Refused(
                "Bad Request: message is not modified: specified new message content and reply markup "
                "are exactly the same as a current content and reply markup of the message"
            )
        self.messages[where] = text
        self.edits.append(params)
        return {
            "message_id": where[1],
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "chat": {"id": where[0], "type": "private" if where[0] > 0 else "supergroup"},
            "from": self.bot_user(),
            "text": text,
        }

    def _api_deleteMessage(self, params: dict[str, Any]) -> bool:
        where = (int(params["chat_id"]), int(params["message_id"]))
        if self.messages.pop(where, None) is None:
            raise _Refused("Bad Request: message to delete not found")
        self.deletes.append(params)
        return True

    def _api_sendChatAction(self, params: dict[str, Any]) -> bool:
        return True

    def _api_setMyCommands(self, params: dict[str, Any]) -> bool:
        self.commands = list(params.get("commands") or [])
        return True

    def _api_setWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = dict(params)
        return True

    def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        return True

    def _api_getWebhookInfo(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": (self.webhook or {}).get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": 0,
        }

    def _api_close(self, params: dict[str, Any]) -> bool:
        return True


async def _read_params(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        body = await request.read()
        loaded = json.loads(body) if body else {}
        return dict(loaded) if isinstance(loaded, dict) else {}
    form = await request.post()  # urlencoded or multipart
    params: dict[str, Any] = {}
    for key, value in form.items():
        if not isinstance(value, str):
            params[key] = value  # an uploaded file (web.FileField), read by the method taking it
            continue
        params[key] = value if key in _STRING_FIELDS else _json_or_str(value)
    return params


def _file_fields(stored: _StoredFile, size: int) -> dict[str, Any]:
    return {"file_id": stored.file_id, "file_unique_id": stored.unique_id, "file_size": size}


def _json_or_str(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram would attach: a leading bot command and @mentions (UTF-16 offsets)."""

    def utf16(s: str) -> int:
        return len(s.encode("utf-16-le")) // 2

    entities: list[dict[str, Any]] = []
    command = _COMMAND_RE.match(text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": utf16(command.group(0))})
    for mention in _MENTION_RE.finditer(text):
        if command and mention.start() < command.end():
            continue
        entities.append(
            {"type": "mention", "offset": utf16(text[: mention.start()]), "length": utf16(mention.group(0))}
        )
    return entities


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str, **parameters: Any) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)


def _fault_response(request: web.Request, fault: _Fault) -> web.Response:
    if fault.kind == "drop":
        # close the socket before any byte of a response: the client sees a lost connection
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)
    if fault.kind == "migrate":
        return _error(
            400,
            "Bad Request: group chat was upgraded to a supergroup chat",
            migrate_to_chat_id=fault.migrate_to,
        )
    if fault.kind == "429":
        return _error(
            429, f"Too Many Requests: retry after {fault.retry_after}", retry_after=fault.retry_after
        )
    return _error(int(fault.kind), "Bad Gateway" if fault.kind == "502" else "Internal Server Error")
