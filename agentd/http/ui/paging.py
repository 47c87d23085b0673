"""The audit page's pages: newest last, as `GET /audit` lists events, AUDIT_PAGE at a time.

`GET /audit` (and the daemon's query under it) gives the newest `limit` events, oldest first, and has no
cursor; page n asks for the newest n × AUDIT_PAGE + 1 and shows the first AUDIT_PAGE of the newest
n × AUDIT_PAGE (the one more says whether there is an older page). Deep pages cost more, and stop at
MAX_PAGE: further back is `agentd audit export`'s.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from agentd.http.ui.render import Problem

AUDIT_PAGE = 100
MAX_PAGE = 50


def audit_page_number(raw: str | None) -> int:
    """The `page` query parameter: 1 (the newest) unless a number from 1 to MAX_PAGE says otherwise."""
    if raw is None or raw == "":
        return 1
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise Problem(
            400,
            "Bad page",
            f"page must be a number from 1 to {MAX_PAGE}; older events: agentd audit export --since TIME",
        )
    return int(raw)


def audit_page_of(newest: list[dict[str, Any]], number: int) -> tuple[list[dict[str, Any]], bool]:
    """Page `number`'s events (oldest first) out of the newest number × AUDIT_PAGE + 1, and whether
    older ones exist."""
    older = len(newest) > number * AUDIT_PAGE
    end = max(0, len(newest) - (number - 1) * AUDIT_PAGE)
    start = max(0, len(newest) - number * AUDIT_PAGE)
    return newest[start:end], older


def audit_href(filters: dict[str, str], number: int) -> str:
    query = urlencode({**filters, **({"page": str(number)} if number > 1 else {})})
    return "/ui/audit" + (f"?{query}" if query else "")
