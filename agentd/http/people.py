"""The people routes: everything held about one person, exported or erased (a data-subject request).

Both span every agent and the daemon's own trail (agentd/daemon/people.py). An erasure is audited
with who asked (`http:<client address>`), counts per kind and a salted hash of the id, never the id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Path, Request

from agentd.events import USER_ID_FORM, USER_ID_PATTERN
from agentd.http.auth import client_of
from agentd.http.bodies import documented_pattern
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import check_user


def user_param() -> Any:
    return Path(
        **documented_pattern(
            USER_ID_PATTERN, f"the person's user id as the channels give it ({USER_ID_FORM})"
        )
    )


def _refuse_partial(what: str, failed: dict[str, str]) -> None:
    """A person's data must not look exported, or erased, when some of it could not be reached."""
    if failed:
        stores = "; ".join(f"{name}: {reason}" for name, reason in sorted(failed.items()))
        raise ApiError(503, f"{what} could not reach every agent's data ({stores}); try again")


def add_people_routes(app: FastAPI, directory: AgentDirectory, protected: Sequence[Any]) -> None:
    get, delete = routes(app, "GET", protected), routes(app, "DELETE", protected)

    @get("/people/{user_id}/export", 400, 503, tag="people")
    async def export_person(user_id: str = user_param()) -> dict[str, Any]:
        """Everything stored about one person across every agent, as one document: per agent, their
        conversations (theirs whole; their exchanges in shared ones), persistent memories, facts,
        episodes, runs, approvals and audit events naming them, each item with its conversation.
        `agents` is empty when nothing is held (after an erasure, too)."""
        check_user(user_id)
        document = await directory.export_person(user_id)
        _refuse_partial("the export", document.pop("failed"))
        return document

    @delete("/people/{user_id}", 400, 503, tag="people")
    async def erase_person(request: Request, user_id: str = user_param()) -> dict[str, Any]:
        """Erase one person from every agent: their own conversations whole, their exchanges in shared
        ones as tombstones, their memories, facts, episodes, runs and approvals, the audit fields naming
        them (the hash chains still verify). Answers the counts per agent and kind, and the subject
        recorded in the audit (a salted scrypt hash of the id). A 503 names the agents whose data could
        not be reached: the others are erased, and asking again erases the rest."""
        check_user(user_id)
        result = await directory.erase_person(user_id, f"http:{client_of(request)}")
        _refuse_partial("the erasure", result.pop("failed"))
        return result
