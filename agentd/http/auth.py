"""The bearer token: with `http.token` set, every route but /healthz and /readyz (and the platform
callbacks, which carry their own proof) needs `Authorization: Bearer <token>`."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError

TokenCheck = Callable[[Request], Awaitable[None]]


def client_of(request: Request) -> str | None:
    return request.client.host if request.client else None


def bearer_token(directory: AgentDirectory) -> TokenCheck:
    """The dependency that refuses a request without the token: a 401 first and always, whatever the
    store is doing (the refusal is only counted; auth_failures.py audits the counts later)."""

    async def require_token(request: Request) -> None:
        if directory.token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            directory.note_auth_failure(request.url.path, "missing token", client_of(request))
            raise ApiError(401, "missing bearer token: send Authorization: Bearer <http.token>")
        if not hmac.compare_digest(given.encode(), directory.token.encode()):
            directory.note_auth_failure(request.url.path, "wrong token", client_of(request))
            raise ApiError(401, "wrong bearer token")

    return require_token
