"""`agentd person link PERSON ACCOUNT…`, `agentd person unlink PERSON ACCOUNT…`, `agentd person show NAME`:
the operator's hand on the accounts linked into one person (agentd/engine/linking.py).

Beside a running daemon they go through its API (POST /people/{person}/accounts, DELETE
/people/{person}/accounts/{account}, GET /people/{name}): its cache of links must hear of the change.
With none, they run here on the daemon's own store, audited there with `by: cli`; after a link, the
persistent keys the person's accounts both held are audited as merged in each agent's store, as a
daemon's link does.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx

from agentd.cli.people import held_here
from agentd.cli.remote import answer, running_daemon
from agentd.daemon.people import audit_merged_in_stores
from agentd.daemon.resources import Resources
from agentd.engine.linking import LinkRefused, People
from agentd.errors import AgentdError
from agentd.store.records import Linked


def _quoted(value: str) -> str:
    return quote(value, safe="")


def _through(
    args: argparse.Namespace,
    remote: Callable[[httpx.Client], list[dict[str, Any]]],
    here: Callable[[Resources, People], Awaitable[list[dict[str, Any]]]],
) -> list[dict[str, Any]]:
    """The daemon's answers when one runs, else this process's (a refusal is an error saying why)."""
    with running_daemon(args) as client:
        if client is not None:
            return remote(client)

    async def go() -> list[dict[str, Any]]:
        async with held_here(args) as (resources, _store, people):
            try:
                return await here(resources, people)
            except LinkRefused as e:
                raise AgentdError(str(e)) from None

    return asyncio.run(go())


def _shown(person: str, accounts: list[str]) -> str:
    return f"{person}: {', '.join(accounts)}" if accounts else f"{person}: no linked accounts"


def _accounts(args: argparse.Namespace) -> list[str]:
    if not args.accounts:
        raise AgentdError(f"person {args.action}: name the accounts after the person (e.g. telegram:42)")
    return list(args.accounts)


def cmd_person_link(args: argparse.Namespace) -> int:
    person, accounts = args.user_id, _accounts(args)

    def remote(client: httpx.Client) -> list[dict[str, Any]]:
        path = f"/people/{_quoted(person)}/accounts"
        return [answer(client.post(path, json={"account": account})) for account in accounts]

    async def here(resources: Resources, people: People) -> list[dict[str, Any]]:
        done = []
        for account in accounts:
            linked, changed = await people.add_account(person, account, "cli", "cli")
            done.append({"person": person, "accounts": list(linked.accounts), "linked": changed})
        if any(d["linked"] for d in done):
            await audit_merged_in_stores(resources, linked)
        return done

    answers = _through(args, remote, here)
    for account, result in zip(accounts, answers, strict=True):
        print(f"{account}: {'linked' if result['linked'] else 'already linked'}")
    print(_shown(person, answers[-1]["accounts"]))
    return 0


def cmd_person_unlink(args: argparse.Namespace) -> int:
    person, accounts = args.user_id, _accounts(args)

    def remote(client: httpx.Client) -> list[dict[str, Any]]:
        return [
            answer(client.delete(f"/people/{_quoted(person)}/accounts/{_quoted(account)}"))
            for account in accounts
        ]

    async def here(_resources: Resources, people: People) -> list[dict[str, Any]]:
        done = []
        for account in accounts:
            linked = await people.remove_account(person, account, "cli", "cli")
            done.append({"person": person, "accounts": [] if linked is None else list(linked.accounts)})
        return done

    answers = _through(args, remote, here)
    print(_shown(person, answers[-1]["accounts"]))
    return 0


def cmd_person_show(args: argparse.Namespace) -> int:
    name = args.user_id

    def remote(client: httpx.Client) -> list[dict[str, Any]]:
        return [answer(client.get(f"/people/{_quoted(name)}"))]

    async def here(_resources: Resources, people: People) -> list[dict[str, Any]]:
        linked: Linked | None = await people.find(name)
        if linked is None:
            raise AgentdError(f"{name!r} is no person with linked accounts")
        return [{"person": linked.person, "accounts": list(linked.accounts)}]

    [shown] = _through(args, remote, here)
    print(_shown(shown["person"], shown["accounts"]))
    return 0
