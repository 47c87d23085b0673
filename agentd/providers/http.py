"""One POST to a model provider (a JSON reply, or an event stream), with a deadline, retries and
errors that say what to do.

Transient failures (429, 408, 5xx, dropped connections, timeouts) are retried
with capped exponential backoff, or after the provider's `Retry-After` when it
sends one. Anything else fails at once. Every failure that leaves this module is
a `ProviderError` naming the provider, the model and the operator's next step.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from agentd.backoff import backoff_delays
from agentd.errors import (
    CONNECTION,
    CONTEXT_OVERFLOW,
    OTHER,
    STREAM_BROKEN,
    TIMEOUT,
    UNREADABLE,
    CredentialError,
    ProviderError,
)
from agentd.providers.error_bodies import error_body, server_message, snippet, status_reason
from agentd.providers.sse import ServerSentEvent, SSEDecoder

# 529 is Anthropic's "overloaded"; 408 is a request the server gave up waiting for.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one configured provider lives, how patiently to call it, and how to name it in errors."""

    provider: str  # the provider's name in agentd.yaml, e.g. "openai" or "local-llama"
    base_url: str
    key_env: str | None = None  # the env var that holds its key; None when it needs no key
    start_hint: str = "is it running?"  # what to check when nothing listens at base_url
    timeout_s: float = 60.0
    max_retries: int = 3
    retry_base_s: float = 0.5
    retry_cap_s: float = 20.0
    retry_after_cap_s: float = 60.0

    @property
    def shown_url(self) -> str:
        """base_url as errors name it: without a password or query (`https://u:KEY@h/v1?api-key=KEY`
        holds secrets), since an error reaches the run record, GET /agents and the person's reply."""
        parts = urlsplit(self.base_url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))


def api_key(endpoint: Endpoint, configured: str | None, model: str) -> str:
    """The key to send: the configured one, else the endpoint's env var; CredentialError when neither is set.

    The environment is read per call so a key exported after startup is picked up.
    """
    key = configured or (os.environ.get(endpoint.key_env) if endpoint.key_env else None)
    if not key:
        raise CredentialError(provider=endpoint.provider, model=model, key_env=endpoint.key_env)
    return key


def json_post(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    path: str,
    payload: Mapping[str, Any],
    headers: Mapping[str, str],
) -> httpx.Request:
    """The POST of `payload` as JSON to base_url + path, each phase bounded by the endpoint's timeout."""
    url = endpoint.base_url.rstrip("/") + path
    return client.build_request("POST", url, json=payload, headers=headers, timeout=endpoint.timeout_s)


def key_problem(endpoint: Endpoint, configured: str | None, model: str) -> str | None:
    """What a call would say about the missing key, found without calling (GET /agents' warnings)."""
    try:
        api_key(endpoint, configured, model)
    except CredentialError as e:
        return str(e)
    return None


async def post_json(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    path: str,
    payload: Mapping[str, Any],
    *,
    model: str,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """POST `payload` to base_url + path and return the decoded JSON object of a 2xx reply.

    Makes at most `max_retries + 1` attempts, each bounded by `timeout_s` as a
    whole (not per read), and raises ProviderError when they are used up or
    the failure is not worth retrying.
    """
    request = json_post(client, endpoint, path, payload, headers or {})
    response = await _with_retries(endpoint, model, lambda: client.send(request))
    return _json_object(endpoint, model, response)


async def post_form(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    path: str,
    fields: Mapping[str, str],
    files: Mapping[str, tuple[str, bytes, str]],
    *,
    model: str,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """POST a multipart form (fields, and files as (filename, bytes, MIME type)) to base_url + path,
    retried as `post_json`, and return the decoded JSON object of a 2xx reply."""
    url = endpoint.base_url.rstrip("/") + path
    request = client.build_request(
        "POST", url, data=dict(fields), files=dict(files), headers=headers or {}, timeout=endpoint.timeout_s
    )
    response = await _with_retries(endpoint, model, lambda: client.send(request))
    return _json_object(endpoint, model, response)


async def post_sse(
    client: httpx.AsyncClient, endpoint: Endpoint, request: httpx.Request, *, model: str
) -> AsyncGenerator[ServerSentEvent, None]:
    """Send `request` (see `json_post`) and yield the Server-Sent Events of a 2xx reply as they arrive.

    Retried like `post_json` until the reply's status arrives (nothing has been
    read yet, so a retry repeats nothing); after that a broken connection, or a
    read that waits longer than `timeout_s`, raises ProviderError. A long
    answer streams for as long as it keeps coming. Close it with `aclosing`.
    """
    response = await _with_retries(endpoint, model, lambda: client.send(request, stream=True))
    try:
        content_type = response.headers.get("content-type", "")
        if not content_type.startswith("text/event-stream"):
            await response.aread()
            raise unreadable(
                endpoint,
                model,
                f"expected an event stream, got {content_type or 'no content-type'}: "
                f"{snippet(response.text)!r}",
            )
        decoder = SSEDecoder()
        try:
            async for line in response.aiter_lines():
                if (event := decoder.feed(line)) is not None:
                    yield event
        except (TimeoutError, httpx.TimeoutException):
            raise ProviderError(
                f"the stream stalled: nothing came for {endpoint.timeout_s:g}s",
                provider=endpoint.provider,
                model=model,
                unreachable=True,
                reason=STREAM_BROKEN,
            ) from None
        except httpx.TransportError as exc:
            raise ProviderError(
                f"the stream broke off before the answer was complete ({_describe(exc)})",
                provider=endpoint.provider,
                model=model,
                unreachable=True,
                reason=STREAM_BROKEN,
            ) from None
        if (event := decoder.end()) is not None:
            yield event
    finally:
        await response.aclose()


async def _with_retries(
    endpoint: Endpoint, model: str, attempt: Callable[[], Awaitable[httpx.Response]]
) -> httpx.Response:
    """The first 2xx response of up to `max_retries + 1` attempts (its body may still be unread)."""
    attempts = endpoint.max_retries + 1
    backoff = backoff_delays(endpoint.retry_base_s, endpoint.retry_cap_s)
    for number in range(1, attempts + 1):
        wait: float | None = None
        try:
            # httpx's own timeout bounds each phase; the outer deadline bounds the
            # whole call, so a server trickling bytes cannot hold a turn forever.
            async with asyncio.timeout(endpoint.timeout_s):
                response = await attempt()
                if not response.is_success:
                    await response.aread()  # a streamed reply's error body, for the message
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            failure = _Failure(
                f"timed out after {endpoint.timeout_s:g}s: is {endpoint.shown_url} reachable?",
                unreachable=True,
                reason=TIMEOUT,
            )
        except httpx.ConnectError as exc:
            failure = _Failure(
                f"cannot connect to {endpoint.shown_url}: {endpoint.start_hint} ({_describe(exc)})",
                unreachable=True,
                reason=CONNECTION,
            )
        except httpx.TransportError as exc:
            failure = _Failure(
                f"the connection to {endpoint.shown_url} failed ({_describe(exc)}): is it up and reachable?",
                unreachable=True,
                reason=CONNECTION,
            )
        else:
            if response.is_success:
                return response
            failure = _status_failure(endpoint, response)
            if response.status_code not in RETRYABLE_STATUSES:
                raise failure.error(endpoint, model, retryable=False)
            wait = _retry_after(response, endpoint.retry_after_cap_s)
        if number == attempts:
            if attempts > 1:
                failure.message += f" (gave up after {attempts} attempts)"
            raise failure.error(endpoint, model, retryable=True)
        await asyncio.sleep(next(backoff) if wait is None else wait)
    raise AssertionError("not reached: the last attempt returns or raises")


def unreadable(endpoint: Endpoint, model: str, detail: str) -> ProviderError:
    """The error for a successful reply whose body is not what the API promises."""
    return ProviderError(
        f"returned a response agentd cannot read: {detail}",
        provider=endpoint.provider,
        model=model,
        reason=UNREADABLE,
    )


def _json_object(endpoint: Endpoint, model: str, response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        content_type = response.headers.get("content-type", "no content-type")
        raise unreadable(
            endpoint, model, f"the body is not JSON ({content_type}): {snippet(response.text)!r}"
        ) from None
    if not isinstance(body, dict):
        raise unreadable(endpoint, model, f"expected a JSON object, got {type(body).__name__}")
    return body


@dataclass(slots=True)
class _Failure:
    """What went wrong with one attempt; becomes a ProviderError once retrying is over."""

    message: str
    status: int | None = None
    unreachable: bool = False
    reason: str = OTHER

    def error(self, endpoint: Endpoint, model: str, *, retryable: bool) -> ProviderError:
        return ProviderError(
            self.message,
            provider=endpoint.provider,
            model=model,
            status=self.status,
            retryable=retryable,
            unreachable=self.unreachable,
            reason=self.reason,
        )


def _status_failure(endpoint: Endpoint, response: httpx.Response) -> _Failure:
    status = response.status_code
    reason = status_reason(status, error_body(response))
    said = server_message(response)
    server = f" (the server said: {said})" if said else ""
    if status in (401, 403):
        where = f"{endpoint.key_env} or " if endpoint.key_env else ""
        message = (
            f"the API key was refused (HTTP {status}): check {where}"
            f"providers.{endpoint.provider}.api_key in agentd.yaml{server}"
        )
    elif status == 404:
        message = (
            f"model or endpoint not found (HTTP 404 at {endpoint.shown_url}): "
            f"check the model name in the agent file and base_url{server}"
        )
    elif reason == CONTEXT_OVERFLOW:
        message = f"the prompt is longer than the model's context window (HTTP {status}): {said}"
    elif status == 400:
        message = f"the request was rejected (HTTP 400): {said or 'no reason given'}"
    elif status == 429:
        message = (
            f"rate limited (HTTP 429): wait and try again, or lower "
            f"providers.{endpoint.provider}.max_concurrency{server}"
        )
    elif status in RETRYABLE_STATUSES:
        message = f"the provider failed (HTTP {status}): try again later{server}"
    else:
        message = f"unexpected HTTP {status}{server}"
    return _Failure(message, status=status, reason=reason)


def _retry_after(response: httpx.Response, cap: float) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, or `Retry-After` as seconds or a date)."""
    seconds: float | None = None
    if millis := response.headers.get("retry-after-ms"):
        try:
            seconds = float(millis) / 1000
        except ValueError:
            seconds = None
    value = response.headers.get("retry-after")
    if seconds is None and value:
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
