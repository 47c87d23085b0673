"""Who may see /ui/ (and /docs): the bearer token, or a cookie holding an HMAC of it.

A browser opens `/ui/?token=<token>` once: the answer is a redirect that drops
the token from the address and sets an HttpOnly, SameSite=Strict cookie scoped
to /ui, holding an HMAC of the token (not the token). The cookie opens only the
UI, never the JSON API, so a page elsewhere cannot post as you. /docs works the
same way with a cookie scoped to /docs. Every comparison is constant-time and
every refusal is an `auth` audit event.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from agentd.http.ui.render import HEADERS, render

if TYPE_CHECKING:
    from agentd.http.directory import AgentDirectory

COOKIE = "agentd_ui"


def session_value(token: str) -> str:
    """What the cookie holds: derived from the token, so the token itself is never stored by the browser."""
    return hmac.new(token.encode(), b"agentd ui session v1", hashlib.sha256).hexdigest()


def _matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _cookie_redirect(request: Request, token: str, area: str) -> Response:
    """Trade the token in the address for a cookie, then drop it from the address bar."""
    target = request.url.remove_query_params("token")
    location = target.path + (f"?{target.query}" if target.query else "")
    redirect = RedirectResponse(location, status_code=303, headers=HEADERS)
    redirect.set_cookie(COOKIE, session_value(token), path=area, httponly=True, samesite="strict")
    return redirect


async def check_access(request: Request, directory: AgentDirectory, area: str = "/ui") -> Response | None:
    """None when the request may see the pages under `area` (/ui or /docs); else the response to send
    (a cookie redirect, or a 401 page saying how to get in)."""
    token = directory.token
    if token is None:
        return None
    scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
    query = request.query_params.get("token")
    cookie = request.cookies.get(COOKIE)
    if scheme.lower() == "bearer" and bearer:
        if _matches(bearer, token):
            return None
        reason = "wrong token"
    elif query is not None:
        if _matches(query, token):
            return _cookie_redirect(request, token, area)
        reason = "wrong token"
    elif cookie is not None:
        if _matches(cookie, session_value(token)):
            return None
        reason = "stale session cookie"
    else:
        reason = "missing token"
    client = request.client.host if request.client else None
    directory.note_auth_failure(request.url.path, reason, client)
    entry = "/ui/" if area == "/ui" else area
    return render(request, "token_needed.html", {"reason": reason, "entry": entry}, status=401)
