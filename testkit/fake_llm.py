"""A fake model server on loopback that speaks the OpenAI and Anthropic wire formats.

    with FakeLLM() as fake:                      # or fake.start() ... fake.stop()
        fake.reply("hello", usage=(12, 3))
        fake.reply(tool_calls=[("lookup", {"q": "x"})])
        fake.fail(429, retry_after=0.2)          # in each API's own error shape (see _error)
        fake.overflow()                          # "prompt too long", as OpenAI / Anthropic say it
        fake.down(529); ...; fake.up()           # every chat request fails until up()
        fake.reply("slow words", pieces=["slow ", "words"], delay=0.5)  # as streamed, if asked to stream
        ...  # point a provider at fake.url + "/v1" (OpenAI) or fake.url (Anthropic)
        assert fake.requests[0].json["messages"][0]["role"] == "system"

It runs in its own thread with its own event loop, so sync tests, async tests
and a daemon in a subprocess can all use it. Chat calls on either API take the
next item of one shared script; when the script is empty they get a
deterministic default reply ("fake reply to: <last user text>") with usage.
A request with `stream: true` gets the same reply as the API's event stream
(fake_llm_stream), piece by piece, optionally slowly or broken off mid-way.
`/v1/embeddings` and Ollama's native `/api/embed` answer deterministic unit
vectors derived from a hash of each text (`fake_embedding`). Faults
(fail/hang/malformed/drop/raw) can target either embeddings route with
`endpoint="embeddings"`; they queue separately from chat.

Like the real APIs, the fake answers 400 to requests that break wire rules a
provider adapter must respect (tool results that answer no call, unanswered
tool calls; for Anthropic also missing max_tokens and turns that do not
alternate, which the fake enforces strictly so adapters are tested to merge).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from testkit.fake_llm_stream import anthropic_events, openai_events
from testkit.fake_media import (
    AUDIO_SUFFIXES,
    anthropic_image_problem,
    openai_part_problem,
    tool_result_problem,
)

Endpoint = Literal["chat", "embeddings", "transcriptions"]
_AUTO: Any = object()  # `usage` default: estimate token counts from the characters


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fake received. `headers` keys are lower-case; `json` is None for a non-JSON body."""

    path: str
    headers: dict[str, str]
    json: Any
    at: float  # time.monotonic() on arrival, for asserting on waits between retries


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str | None
    tool_calls: tuple[tuple[str, dict[str, Any], str | None], ...]
    usage: Any
    stop_reason: str | None
    pieces: tuple[str, ...] | None = None  # streamed: the text in these pieces (default: word by word)
    delay: float = 0.0  # streamed: seconds between events
    break_after: int | None = None  # streamed: close the connection after this many events


@dataclass(frozen=True, slots=True)
class _Raw:
    status: int
    body: Any  # dict/list -> JSON; str -> sent as is; None -> the API's error shape for `status`
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class _Error:
    """An error status answered in the shape of the API that was called (`code`: OpenAI's error code)."""

    status: int
    message: Any = None  # a str, None for a default, or _OVERFLOW
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Hang:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Drop:
    pass


_Scripted = _Reply | _Raw | _Error | _Hang | _Drop


class FakeLLM:
    def __init__(
        self,
        *,
        embedding_dim: int = 16,
        api_key: str | None = None,
        models: Iterable[str] | None = None,
    ):
        """`api_key`: when set, requests without it (Bearer or x-api-key) get a 401 like the real APIs.
        `models`: when set, any other model name gets a 404."""
        self.embedding_dim = embedding_dim
        self.api_key = api_key
        self.models = None if models is None else frozenset(models)
        self._lock = threading.Lock()
        self._script: dict[Endpoint, deque[_Scripted]] = {
            "chat": deque(),
            "embeddings": deque(),
            "transcriptions": deque(),
        }
        self._requests: list[RecordedRequest] = []
        self._ids = 0
        self._down: _Error | None = None  # while set, every chat request is answered this error
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._port: int | None = None

    # -- lifecycle -----------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeLLM is not running: call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def start(self) -> FakeLLM:
        if self._thread is not None:
            raise RuntimeError("FakeLLM is already running")
        sock = socket.create_server(("127.0.0.1", 0))
        ready = threading.Event()
        failed: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run, args=(sock, ready, failed), name="fake-llm", daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError("FakeLLM did not start within 10 s")
        if failed:
            self._thread.join()
            self._thread = None
            raise RuntimeError("FakeLLM failed to start") from failed[0]
        self._port = sock.getsockname()[1]
        return self

    def stop(self) -> None:
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=10)
        self._thread = self._loop = self._stopping = None
        self._port = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self, sock: socket.socket, ready: threading.Event, failed: list[BaseException]) -> None:
        try:
            asyncio.run(self._serve(sock, ready))
        except BaseException as exc:  # report to start(); never let the thread die noisily
            failed.append(exc)
            ready.set()

    async def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._openai_chat)
        app.router.add_post("/v1/messages", self._anthropic_messages)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/api/embed", self._ollama_embed)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        # handler_cancellation: a client that gives up (timeout test) cancels the hang at once.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.2)
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            ready.set()
            await self._stopping.wait()
        finally:
            await runner.cleanup()
            sock.close()

    # -- scripting -----------------------------------------------------------------

    def reply(
        self,
        text: str | None = None,
        *,
        tool_calls: Sequence[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]] = (),
        usage: tuple[int, int] | None = _AUTO,
        stop_reason: str | None = None,
        pieces: Sequence[str] | None = None,
        delay: float = 0.0,
        break_after: int | None = None,
    ) -> None:
        """Queue an assistant reply. `tool_calls` items are (name, arguments) or (name, arguments, id);
        `usage` is (input, output) tokens, None to send no usage, or by default an estimate.
        Asked for a stream, the fake sends the text in `pieces` (default: word by word), waits
        `delay` seconds after each event, and with `break_after` closes the connection after that
        many events (an OpenAI stream starts with a role chunk; an Anthropic one with message_start
        and the block's start)."""
        calls = tuple((c[0], dict(c[1]), c[2] if len(c) == 3 else None) for c in tool_calls)
        cut = None if pieces is None else tuple(pieces)
        self._push("chat", _Reply(text, calls, usage, stop_reason, cut, delay, break_after))

    def fail(
        self,
        status: int,
        body: Any = None,
        *,
        retry_after: float | str | None = None,
        endpoint: Endpoint = "chat",
        message: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue an error status; `body` defaults to the error shape of the API called (OpenAI's
        `{"error": {message, type, param, code}}`, Anthropic's `{"type": "error", "error": {type,
        message}}`), with `message` and OpenAI's `code` when given; `headers` are sent with it."""
        sent = dict(headers or {}) | ({} if retry_after is None else {"Retry-After": str(retry_after)})
        if body is None:
            self._push(endpoint, _Error(status, message, code, sent))
        else:
            self._push(endpoint, _Raw(status, body, sent))

    def overflow(
        self,
        tokens: int = 210_000,
        window: int = 200_000,
        *,
        server: Literal["api", "llama.cpp", "ollama"] = "api",
        endpoint: Endpoint = "chat",
    ) -> None:
        """Queue the 400 a prompt past the context window gets, as each server says it. "api": the
        API called, OpenAI's code `context_length_exceeded` (vLLM's OpenAI-compatible server sends the
        same words), Anthropic's "prompt is too long: N tokens > M maximum". "llama.cpp": its server's
        `exceed_context_size_error` with n_prompt_tokens and n_ctx. "ollama": its OpenAI-compatible
        endpoint's "the input length exceeds the context length" (no numbers)."""
        if server == "llama.cpp":
            message = f"request ({tokens} tokens) exceeds the available context size ({window} tokens)"
            error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
            self._push(
                endpoint, _Raw(400, {"error": error | {"n_prompt_tokens": tokens, "n_ctx": window}}, {})
            )
        elif server == "ollama":
            message = "the input length exceeds the context length"
            body = {
                "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
            }
            self._push(endpoint, _Raw(400, body, {}))
        else:
            headers = {"x-window": f"{tokens}/{window}"}
            self._push(endpoint, _Error(400, _OVERFLOW, "context_length_exceeded", headers))

    def down(self, status: int = 503, *, retry_after: float | None = None) -> None:
        """Answer every chat request `status` (in the API's error shape) until `up()`: a model that is
        down, overloaded (529) or rate-limited for a while, not for one request."""
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        with self._lock:
            self._down = _Error(status, None, None, headers)

    def up(self) -> None:
        with self._lock:
            self._down = None

    def hang(self, seconds: float, *, endpoint: Endpoint = "chat") -> None:
        """Queue a request that waits `seconds` before answering the default reply."""
        self._push(endpoint, _Hang(seconds))

    def malformed(
        self, body: str = "<html>502 upstream hiccup</html>", *, endpoint: Endpoint = "chat"
    ) -> None:
        """Queue a 200 whose body no client can read (by default not even JSON)."""
        self._push(endpoint, _Raw(200, body, content_type="text/html"))

    def drop(self, *, endpoint: Endpoint = "chat") -> None:
        """Queue a request whose connection is closed without any response."""
        self._push(endpoint, _Drop())

    def raw(
        self,
        body: Any,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
        endpoint: Endpoint = "chat",
    ) -> None:
        """Queue an exact response body (a dict/list is sent as JSON, a str as is, as `content_type`:
        e.g. a hand-made "text/event-stream")."""
        self._push(endpoint, _Raw(status, body, dict(headers or {}), content_type))

    def clear(self) -> None:
        """Forget the script and the recorded requests."""
        with self._lock:
            for queue in self._script.values():
                queue.clear()
            self._requests.clear()

    @property
    def pending(self) -> int:
        """Scripted chat responses not yet used."""
        with self._lock:
            return len(self._script["chat"])

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `count` requests arrived (for tests driving a daemon in a subprocess)."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.requests
            if len(seen) >= count:
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"FakeLLM got {len(seen)} requests, expected {count}, within {timeout}s")
            time.sleep(0.01)

    def _push(self, endpoint: Endpoint, item: _Scripted) -> None:
        with self._lock:
            self._script[endpoint].append(item)

    def _next(self, endpoint: Endpoint) -> _Scripted | None:
        with self._lock:
            queue = self._script[endpoint]
            return queue.popleft() if queue else None

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    # -- HTTP handlers -------------------------------------------------------------

    async def _receive(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            self._requests.append(RecordedRequest(request.path, headers, body, time.monotonic()))
        return body

    async def _openai_chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._receive(request)
        if (refused := self._refuse(request, body, "openai", _check_openai)) is not None:
            return refused
        item = await self._scripted("chat", request, "openai")
        if isinstance(item, web.StreamResponse):
            return item
        reply = item or self._default_reply(body, "openai")
        answer = self._openai_reply(reply, body)
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _stream(request, openai_events(answer, reply.pieces, usage), reply)
        return _json(200, answer)

    async def _anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._receive(request)
        if (refused := self._refuse(request, body, "anthropic", _check_anthropic)) is not None:
            return refused
        item = await self._scripted("chat", request, "anthropic")
        if isinstance(item, web.StreamResponse):
            return item
        reply = item or self._default_reply(body, "anthropic")
        answer = self._anthropic_reply(reply, body)
        if body.get("stream"):
            return await _stream(request, anthropic_events(answer, reply.pieces), reply)
        return _json(200, answer)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body = await self._receive(request)
        if (refused := self._refuse(request, body, "openai", _check_embeddings)) is not None:
            return refused
        item = await self._scripted("embeddings", request, "openai")
        if isinstance(item, web.StreamResponse):
            return item
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        dim = body.get("dimensions") or self.embedding_dim
        tokens = sum(_estimate_tokens(t) for t in texts)
        return _json(
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": fake_embedding(t, dim)}
                    for i, t in enumerate(texts)
                ],
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def transcript(self, text: str) -> None:
        """Queue what the next /v1/audio/transcriptions answers (default: "fake transcript of <file>")."""
        self._push("transcriptions", _Reply(text, (), None, None))

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's POST /v1/audio/transcriptions: a multipart form with `file` and `model`; recorded
        with the form's fields, the file as {filename, size}."""
        form = await request.post()
        upload = form.get("file")
        recorded: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        if isinstance(upload, web.FileField):
            recorded["file"] = {"filename": upload.filename, "size": len(upload.file.read())}
        headers = {k.lower(): v for k, v in request.headers.items()}
        with self._lock:
            self._requests.append(RecordedRequest(request.path, headers, recorded, time.monotonic()))
        if self.api_key is not None and request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return _error("openai", 401, "invalid api key")
        if not isinstance(upload, web.FileField) or not recorded.get("model"):
            return _error("openai", 400, "a multipart form with `file` and `model` is required")
        if not upload.filename.lower().endswith(AUDIO_SUFFIXES):
            return _error("openai", 400, f"Invalid file format. Supported formats: {list(AUDIO_SUFFIXES)}")
        item = await self._scripted("transcriptions", request, "openai")
        if isinstance(item, web.StreamResponse):
            return item
        text = item.text if isinstance(item, _Reply) else f"fake transcript of {upload.filename}"
        return _json(200, {"text": text})

    async def _ollama_embed(self, request: web.Request) -> web.StreamResponse:
        body = await self._receive(request)
        if (refused := self._refuse(request, body, "ollama", _check_ollama_embed)) is not None:
            return refused
        item = await self._scripted("embeddings", request, "ollama")
        if isinstance(item, web.StreamResponse):
            return item
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        dim = body.get("dimensions") or self.embedding_dim
        return _json(
            200,
            {
                "model": body["model"],
                "embeddings": [fake_embedding(t, dim) for t in texts],
                "total_duration": 1_000_000,
                "load_duration": 1_000,
                "prompt_eval_count": sum(_estimate_tokens(t) for t in texts),
            },
        )

    def _refuse(self, request: web.Request, body: Any, api: str, check: Any) -> web.Response | None:
        """The 401/404/400 a real server would give before doing any work."""
        if self.api_key is not None:
            sent = (
                request.headers.get("x-api-key")
                if api == "anthropic"
                else request.headers.get("Authorization", "").removeprefix("Bearer ")
            )
            if sent != self.api_key:
                return _error(api, 401, "invalid api key")
        if not isinstance(body, dict):
            return _error(api, 400, "the request body is not a JSON object")
        problem = check(body)
        if problem:
            return _error(api, 400, problem)
        if self.models is not None and body.get("model") not in self.models:
            return _error(api, 404, f"model {body.get('model')!r} not found")
        return None

    async def _scripted(self, endpoint: Endpoint, request: web.Request, api: str) -> Any:
        """The next scripted item: a finished response for faults, a _Reply, or None for the default."""
        with self._lock:
            down = self._down if endpoint == "chat" else None
        item = down or self._next(endpoint)
        if isinstance(item, _Error):
            return _error(api, item.status, _error_message(item, api), item.headers, item.code)
        if isinstance(item, _Hang):
            await asyncio.sleep(item.seconds)
            return None
        if isinstance(item, _Drop):
            if request.transport is not None:
                request.transport.close()
            # Leave without a response; aiohttp treats the cancelled handler as a closed connection.
            raise asyncio.CancelledError
        if isinstance(item, _Raw):
            if item.body is None:
                return _error(api, item.status, f"scripted failure {item.status}", item.headers)
            if isinstance(item.body, str):
                return web.Response(
                    status=item.status,
                    text=item.body,
                    content_type=item.content_type or "text/plain",
                    headers=item.headers,
                )
            return _json(item.status, item.body, item.headers)
        return item

    # -- reply shapes --------------------------------------------------------------

    def _default_reply(self, body: dict[str, Any], api: str) -> _Reply:
        return _Reply(f"fake reply to: {_last_user_text(body)}", (), _AUTO, None)

    def _usage(self, reply: _Reply, body: dict[str, Any]) -> tuple[int, int] | None:
        if reply.usage is not _AUTO:
            return reply.usage
        out_chars = len(reply.text or "") + sum(len(n) + len(json.dumps(a)) for n, a, _ in reply.tool_calls)
        return _estimate_tokens(json.dumps(body)), max(1, _estimate_tokens("x" * out_chars))

    def _openai_reply(self, reply: _Reply, body: dict[str, Any]) -> dict[str, Any]:
        n = self._next_id()
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id or f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args, call_id) in enumerate(reply.tool_calls)
            ]
        finish = reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")
        out: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if (usage := self._usage(reply, body)) is not None:
            out["usage"] = {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            }
        return out

    def _anthropic_reply(self, reply: _Reply, body: dict[str, Any]) -> dict[str, Any]:
        n = self._next_id()
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for i, (name, args, call_id) in enumerate(reply.tool_calls):
            content.append(
                {"type": "tool_use", "id": call_id or f"toolu_{n}_{i}", "name": name, "input": args}
            )
        stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
        out: dict[str, Any] = {
            "id": f"msg_fake_{n}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
        }
        if (usage := self._usage(reply, body)) is not None:
            out["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return out


def fake_embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for `text`: equal texts give equal vectors, others look unrelated."""
    values: list[float] = []
    block = 0
    while len(values) < dim:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        values.extend((b - 127.5) / 127.5 for b in digest)
        block += 1
    vector = values[:dim]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


# -- wire rules the real servers enforce ---------------------------------------------


def _check_openai(body: dict[str, Any]) -> str | None:
    if not isinstance(body.get("model"), str):
        return "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}]: invalid role {role!r}"
        if role == "tool":
            if m.get("tool_call_id") not in open_calls:
                return (
                    f"messages[{i}]: messages with role 'tool' must be a response to a preceding "
                    "message with 'tool_calls'"
                )
            if not isinstance(m.get("content"), str):
                return f"messages[{i}].content must be a string"
            open_calls.discard(m["tool_call_id"])
            continue
        if open_calls:
            return (
                "an assistant message with 'tool_calls' must be followed by tool messages responding "
                f"to each 'tool_call_id'; missing: {sorted(open_calls)}"
            )
        if role == "assistant":
            for call in m.get("tool_calls") or []:
                function = call.get("function") or {}
                if not isinstance(function.get("arguments"), str):
                    return f"messages[{i}].tool_calls: 'arguments' must be a JSON string"
                open_calls.add(call.get("id"))
            if m.get("content") is None and not m.get("tool_calls"):
                return f"messages[{i}]: an assistant message needs content or tool_calls"
        elif not isinstance(m.get("content"), str | list):
            return f"messages[{i}].content must be a string or an array"
        elif isinstance(m["content"], list) and role == "user":
            for j, part in enumerate(m["content"]):
                if problem := openai_part_problem(f"messages[{i}].content[{j}]", part):
                    return problem
    if open_calls:
        return f"tool calls without results: {sorted(open_calls)}"
    return None


def _check_anthropic(body: dict[str, Any]) -> str | None:
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    expected = "user"
    open_uses: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role != expected:
            return f"messages.{i}: roles must alternate between 'user' and 'assistant', starting with 'user'"
        expected = "assistant" if role == "user" else "user"
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}: content must be a non-empty string or list"
        answered: set[str] = set()
        for j, b in enumerate(blocks):
            kind = b.get("type") if isinstance(b, dict) else None
            if kind == "text" and not b.get("text"):
                return f"messages.{i}.content.{j}: text content blocks must be non-empty"
            if kind == "tool_use" and role == "assistant":
                if not isinstance(b.get("input"), dict):
                    return f"messages.{i}.content.{j}.input: Input should be a valid dictionary"
                if not re.fullmatch(r"[a-zA-Z0-9_-]+", str(b.get("id") or "")):
                    # as the API says it: an id carried over from another provider must fit too
                    return f"messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            elif kind == "tool_result" and role == "user":
                if b.get("tool_use_id") not in open_uses:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{b.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
                answered.add(b["tool_use_id"])
                if problem := tool_result_problem(f"messages.{i}.content.{j}.content", b.get("content")):
                    return problem
            elif kind == "image" and role == "user":
                if problem := anthropic_image_problem(f"messages.{i}.content.{j}", b):
                    return problem
            elif kind != "text":
                return f"messages.{i}.content.{j}: unexpected block type {kind!r} in a {role} message"
        if role == "user" and open_uses - answered:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(sorted(open_uses - answered))}"
            )
        open_uses = (
            {b["id"] for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
            if role == "assistant"
            else set()
        )
    return None


def _check_embeddings(body: dict[str, Any]) -> str | None:
    texts = body.get("input")
    if isinstance(texts, str):
        return None
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return "'input' must be a string or a non-empty array of strings"
    return None


def _check_ollama_embed(body: dict[str, Any]) -> str | None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is required"
    texts = body.get("input")
    if isinstance(texts, str) or (isinstance(texts, list) and all(isinstance(t, str) for t in texts)):
        return None
    return "invalid input type"


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        if texts:
            return str(texts[-1])
    return ""


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


async def _stream(request: web.Request, events: list[bytes], reply: _Reply) -> web.StreamResponse:
    """Send the events one by one, as the scripted reply says (slowly, or broken off)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for sent, event in enumerate(events):
        if reply.break_after is not None and sent >= reply.break_after:
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError  # as for a dropped request: leave without finishing the body
        await response.write(event)
        if reply.delay:
            await asyncio.sleep(reply.delay)
    await response.write_eof()
    return response


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# OpenAI's error `type` and `code` by status, as its API sends them (the openai SDK maps the status
# to its exception: 400 BadRequestError ... 429 RateLimitError, >= 500 InternalServerError).
_OPENAI_ERRORS = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_OVERFLOW = object()  # message placeholder: each API's own words for a prompt past the window


def _error_message(item: _Error, api: str) -> str:
    if item.message is _OVERFLOW:
        tokens, window = item.headers.get("x-window", "210000/200000").split("/")
        if api == "anthropic":
            return f"prompt is too long: {tokens} tokens > {window} maximum"
        return (
            f"This model's maximum context length is {window} tokens. However, your messages resulted "
            f"in {tokens} tokens. Please reduce the length of the messages."
        )
    if item.message is not None:
        return str(item.message)
    if api == "anthropic" and item.status == 529:
        return "Overloaded"
    return f"scripted failure {item.status}"


def _error(
    api: str, status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None
) -> web.Response:
    """An error body in the API's own shape, so clients parse it as they would the real one."""
    headers = {k: v for k, v in (headers or {}).items() if k != "x-window"}
    if api == "ollama":
        return _json(status, {"error": message}, headers)
    if api == "anthropic":
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
        return _json(status, body, headers)
    kind, default_code = _OPENAI_ERRORS.get(
        status, ("invalid_request_error" if status < 500 else "server_error", None)
    )
    param = "messages" if code == "context_length_exceeded" else None
    body = {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}
    return _json(status, body, headers)
