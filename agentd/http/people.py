"""The people routes: everything held about one person, exported or erased (a data-subject request),
and the accounts linked into one person (agentd/engine/linking.py).

Export and erasure span every agent and the daemon's own trail (agentd/daemon/people.py). An erasure
is audited with who asked (`http:<client address>`), counts per kind and a salted hash of the id, never
the id. A link or unlink is audited in the daemon's trail with who asked, like one made from a chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from agentd.config.people import ACCOUNT_FORM, ACCOUNT_PATTERN, PERSON_NAME_FORM, PERSON_NAME_PATTERN
from agentd.engine.linking import AccountTaken, LinkRefused, NoSuchLink
from agentd.events import USER_ID_FORM, USER_ID_PATTERN
from agentd.http.auth import client_of
from agentd.http.bodies import body_schema, documented_pattern, read_json
from agentd.http.directory import AgentDirectory
from agentd.http.errors import ApiError, routes
from agentd.http.lookup import check_user
from agentd.store.records import Linked


def user_param() -> Any:
    return Path(
        **documented_pattern(
            USER_ID_PATTERN, f"the person's user id as the channels give it ({USER_ID_FORM})"
        )
    )


def person_param() -> Any:
    return Path(**documented_pattern(PERSON_NAME_PATTERN, f"the person's name ({PERSON_NAME_FORM})"))


def account_param() -> Any:
    return Path(**documented_pattern(ACCOUNT_PATTERN, f"one of the person's accounts ({ACCOUNT_FORM})"))


class AccountIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str = Field(
        json_schema_extra={"pattern": ACCOUNT_PATTERN}, description=f"the account to link: {ACCOUNT_FORM}"
    )


def _person(linked: Linked | None, person: str) -> dict[str, Any]:
    return {"person": person, "accounts": [] if linked is None else list(linked.accounts)}


def _refused(e: LinkRefused) -> ApiError:
    """A refused link as the status it is: nothing to unlink 404, another person's account 409, an id
    of the wrong form 400 (each with the reason)."""
    return ApiError(404 if isinstance(e, NoSuchLink) else 409 if isinstance(e, AccountTaken) else 400, str(e))


def _refuse_partial(what: str, failed: dict[str, str]) -> None:
    """A person's data must not look exported, or erased, when some of it could not be reached."""
    if failed:
        stores = "; ".join(f"{name}: {reason}" for name, reason in sorted(failed.items()))
        raise ApiError(503, f"{what} could not reach every agent's data ({stores}); try again")


def add_people_routes(app: FastAPI, directory: AgentDirectory, protected: Sequence[Any]) -> None:
    get, delete = routes(app, "GET", protected), routes(app, "DELETE", protected)
    post = routes(app, "POST", protected)

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

    @get("/people/{user_id}", 400, 404, tag="people")
    async def show_person(user_id: str = user_param()) -> dict[str, Any]:
        """A person and their linked accounts, found by the person's name, one of their accounts
        (`telegram:42`) or the bare user id of one; 404 when no linked person answers to it."""
        check_user(user_id)
        linked = await directory.people.find(user_id)
        if linked is None:
            raise ApiError(404, f"{user_id!r} is no person with linked accounts")
        return _person(linked, linked.person)

    @post("/people/{person}/accounts", 400, 409, 413, 422, tag="people", openapi_extra=body_schema(AccountIn))
    async def link_account(request: Request, person: str = person_param()) -> dict[str, Any]:
        """Link an account into the person (the person is made by their first account). Linking one
        they hold already changes nothing (`linked: false`); an account of another person is a 409:
        unlink it there first. Audited in the daemon's trail with who asked."""
        body = await read_json(request, AccountIn, directory.max_body_bytes)
        try:
            linked, changed = await directory.people.add_account(
                person, body.account, "http", f"http:{client_of(request)}"
            )
        except LinkRefused as e:
            raise _refused(e) from None
        return {**_person(linked, person), "linked": changed}

    @delete("/people/{person}/accounts/{account}", 400, 404, tag="people")
    async def unlink_account(
        request: Request, person: str = person_param(), account: str = account_param()
    ) -> dict[str, Any]:
        """Take an account out of the person; a person left with one account is no person any more, so
        that one is unlinked too (`accounts` then is empty). Each account keeps what it wrote. Audited."""
        try:
            linked = await directory.people.remove_account(
                person, account, "http", f"http:{client_of(request)}"
            )
        except LinkRefused as e:
            raise _refused(e) from None
        return _person(linked, person)
