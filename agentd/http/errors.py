"""Every error the API answers, in one shape, and documented per route in the OpenAPI.

The body is always `{"error": reason}`; a 422 adds `detail`, one `{field, reason}`
per field that failed. Each route lists the statuses it can answer (`errors(...)`),
so the OpenAPI names every one of them with this schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from agentd.errors import DatabaseUnavailable, LeaseLost, StoreError

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class ApiError(Exception):
    def __init__(self, status: int, reason: str, **extra: Any):
        self.status, self.reason, self.extra = status, reason, extra


class FieldProblem(BaseModel):
    field: str = Field(description="where: `text` (a body field), `query.limit`, `path.agent`, ...")
    reason: str


class ErrorOut(BaseModel):
    """What every 4xx and 5xx answer carries."""

    error: str = Field(description="what went wrong and, where it helps, what to do")
    detail: list[FieldProblem] | None = Field(default=None, description="422 only: one entry per field")
    approval: str | None = Field(
        default=None, description="409 only, when the conversation waits for this approval (answer it first)"
    )


WHEN = {
    400: "Malformed JSON, or a value of the wrong form (a conversation key, a user id, `since`)",
    401: "Missing or wrong bearer token (only when http.token is set)",
    404: "No such agent, conversation item or route",
    409: "The request conflicts with what is stored now (an approval already decided or expired; a "
    "conversation held by a run that waits for an approval: `approval` names it)",
    413: "The request body is over http.max_body_bytes",
    422: "A field failed validation: `detail` names each",
    503: "The agent cannot serve now (its file was rejected, it failed to start, it is stopping) or its "
    "data file or database is unavailable: `error` says which",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route answering these statuses; 401 (any route may need the token) and
    422 (any parameter FastAPI checks: documented in this shape, not FastAPI's own) always."""
    codes = sorted({401, 422, *statuses})
    return {code: {"model": ErrorOut, "description": WHEN[code]} for code in codes}


def routes(app: FastAPI, method: str, dependencies: Sequence[Any]) -> Callable[..., Callable[[F], F]]:
    """`routes(app, "GET", protected)(path, 404, 503)` registers a route answering `method` on `path`,
    behind `dependencies` (the token), with the error statuses it can answer documented."""

    def route(path: str, *statuses: int, tag: str = "agents", **extra: Any) -> Callable[[F], F]:
        register: Callable[[F], F] = app.api_route(
            path,
            methods=[method],
            tags=[tag],
            dependencies=list(dependencies),
            responses=errors(*statuses),
            **extra,
        )
        return register

    return route


def reasons(problems: Any) -> list[dict[str, Any]]:
    """pydantic's errors as `{field, reason}`: `text` for a body field, `query.limit` for a parameter."""
    out = []
    for err in problems:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        out.append({"field": ".".join(loc), "reason": err.get("msg", "invalid")})
    return out


Special = tuple[Callable[[str], bool], Callable[..., JSONResponse]]


def install_error_handlers(app: FastAPI, special: Special | None = None) -> None:
    """Every refusal in this shape, except on paths `special` claims (a path test, and what builds the
    refusal there: the OpenAI-compatible routes answer in OpenAI's shape, which its clients read)."""

    def refusal(request: Request, status: int, reason: str, **extra: Any) -> JSONResponse:
        if special is not None and special[0](request.url.path):
            return special[1](status, reason, **extra)
        return JSONResponse({"error": reason, **extra}, status_code=status)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return refusal(request, exc.status, exc.reason, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return refusal(request, 422, "invalid request", detail=reasons(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of the first route on the path; a path has several (GET, DELETE)
            headers["Allow"] = ", ".join(_allowed_methods(request))
        response = refusal(request, exc.status_code, str(exc.detail))
        response.headers.update(headers)
        return response

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError) -> JSONResponse:
        log.error("store error on %s: %s", request.url.path, exc)
        if isinstance(exc, LeaseLost):  # (this daemon stalled; the conversation went on elsewhere)
            return refusal(request, 503, f"{exc}; the message was not answered: send it again")
        return refusal(request, 503, store_unavailable(exc))


def store_unavailable(exc: StoreError) -> str:
    """The 503's reason: the database by name on PostgreSQL (never its host or port), the file on SQLite."""
    if isinstance(exc, DatabaseUnavailable):
        return f"the agent's database is unavailable: {exc.public}; the daemon's log has the details"
    return f"the agent's data file is unavailable: {exc}"


def _allowed_methods(request: Request) -> list[str]:
    """The methods of the path that matched: every route of its path format (GET and DELETE of
    /agents/{agent}/conversations/{conversation_key}), not only the first route's."""
    matched = [
        r
        for r in request.app.router.routes
        if isinstance(r, Route) and r.matches(request.scope)[0] == Match.PARTIAL
    ]
    if not matched:
        return []
    path = matched[0].path_format
    return sorted({m for r in matched if r.path_format == path for m in r.methods or ()})
