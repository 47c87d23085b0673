"""`agentd person export USER` and `agentd person erase USER`: a data-subject request, across every agent.

Beside a running daemon both go through it (GET /people/{user}/export, DELETE /people/{user}): it
owns the data and its hot caches must let go of what is erased. With none, they run here, on the
daemon's own store's links too: a linked person's every account is exported, or erased.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx

from agentd.cli.audit import private_file
from agentd.cli.remote import answer, running_daemon
from agentd.cli.settings import settings_of
from agentd.daemon.people import erase_linked, export_linked
from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.engine.linking import People
from agentd.errors import AgentdError
from agentd.events import USER_ID_FORM, is_user_id
from agentd.store.base import Store


@contextlib.asynccontextmanager
async def held_here(args: argparse.Namespace) -> AsyncIterator[tuple[Resources, Store, People]]:
    """With no daemon running: the data folder's resources, the daemon's own store open, and the links
    kept there (what a daemon would read at its start)."""
    async with Resources(settings_of(args), args.data) as resources:
        store = resources.store(DAEMON_STORE)
        await store.open()
        try:
            resources.people.attach(store)
            yield resources, store, resources.people
        finally:
            await store.close()


Here = Callable[[Resources, Store, People, str], Awaitable[dict[str, Any]]]


def _request(
    args: argparse.Namespace, remote: Callable[[httpx.Client, str], httpx.Response], here: Here
) -> dict[str, Any]:
    """The answer of the daemon that owns the data when one runs (`remote`, with the id quoted for a
    path), else of this process (`here`); a partial answer here is an error naming what was missed."""
    with running_daemon(args) as client:
        if client is not None:
            if not is_user_id(args.user_id):
                # the daemon's routes take the ids its intake accepts; one kept before that rule
                # (say, with a space) is reached with the daemon stopped
                raise AgentdError(
                    f"{args.user_id!r} is not a user id ({USER_ID_FORM}), so the daemon that owns "
                    f"{args.data} never took it in: stop it, and run this again (it then runs here)"
                )
            return answer(remote(client, quote(args.user_id, safe="")))

    async def go() -> dict[str, Any]:
        async with held_here(args) as (resources, store, people):
            return await here(resources, store, people, args.user_id)

    result = asyncio.run(go())
    failed = result.pop("failed")
    if failed:
        stores = "; ".join(f"{name}: {reason}" for name, reason in sorted(failed.items()))
        raise AgentdError(f"could not reach every agent's data ({stores}); run it again")
    return result


def _nothing_runs(name: str) -> None:
    return None  # no agent runs in this process: every store is visited directly


def cmd_person_export(args: argparse.Namespace) -> int:
    document = _request(
        args,
        lambda client, user: client.get(f"/people/{user}/export"),
        lambda resources, store, people, user: export_linked(resources, _nothing_runs, store, people, user),
    )
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        with private_file(args.output) as out:
            out.write(text)
    agents = document["agents"]
    print(f"{args.user_id}: data held by {', '.join(agents) or 'no agent'}", file=sys.stderr)
    return 0


def cmd_person_erase(args: argparse.Namespace) -> int:
    result = _request(
        args,
        lambda client, user: client.delete(f"/people/{user}"),
        lambda resources, store, people, user: erase_linked(
            resources, _nothing_runs, store, people, user, "cli"
        ),
    )
    for name, counts in sorted(result["erased"].items()):
        print(f"{name}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())))
    if not result["erased"]:
        print(f"nothing held about {args.user_id}")
    subject = result["subject"]
    print(f"audited as subject scrypt {subject['scrypt']} (salt {subject['salt']}), not the id")
    return 0
