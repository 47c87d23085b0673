"""Turning a template and a context into a /ui/ response, with the headers every page carries.

Autoescape is on for every template whatever its file name, and undefined names
fail loudly: a value reaches a page only escaped, and a typo in a template is an
error in the tests rather than an empty cell.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import Response
from starlette.templating import Jinja2Templates

from agentd.http.ui.views import FILTERS, GLOBALS

HEADERS = {
    # the pages hold private conversations: never cached, never framed, no referrer leaks
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class Problem(Exception):
    """A page that cannot be shown: its status, its title and the sentence that says why."""

    def __init__(self, status: int, title: str, reason: str):
        super().__init__(reason)
        self.status, self.title, self.reason = status, title, reason


def _blank_none(value: Any) -> Any:
    return "" if value is None else value


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_blank_none,
    )
    env.filters.update(FILTERS)
    env.globals.update(GLOBALS)
    return env


TEMPLATES = Jinja2Templates(env=_environment())


AUTO_REFRESH_SECONDS = 10


def auto_refresh(request: Request) -> int | None:
    """`?refresh=N` reloads the page every N seconds: a meta refresh, so no JavaScript and nothing
    the CSP has to allow."""
    given = request.query_params.get("refresh")
    if not given:
        return None
    if not (re.fullmatch(r"[0-9]{1,4}", given) and 1 <= int(given) <= 3600):  # ASCII digits only
        raise Problem(400, "Bad refresh", f"refresh: expected whole seconds from 1 to 3600, got {given}")
    return int(given)


def this_page(request: Request, refresh: int | None) -> str:
    """This page's address, reloading every `refresh` seconds or not at all."""
    url = request.url.remove_query_params("refresh")
    if refresh:
        url = url.include_query_params(refresh=refresh)
    return url.path + (f"?{url.query}" if url.query else "")


def reload_links(request: Request, refresh: int | None) -> dict[str, Any]:
    return {
        "refresh": refresh,
        "reload_href": this_page(request, refresh),
        "auto_href": this_page(request, None if refresh else AUTO_REFRESH_SECONDS),
        "auto_seconds": AUTO_REFRESH_SECONDS,
    }


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    """`api`: the JSON routes that serve what the page shows (linked under its title)."""
    context = {"api": [], "api_needs_token": False, "refresh": None, "reload_href": None, **context}
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status, headers=HEADERS)


def render_problem(request: Request, problem: Problem) -> Response:
    context = {"title": problem.title, "reason": problem.reason}
    return render(request, "problem.html", context, problem.status)
