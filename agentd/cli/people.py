"""`agentd person export USER` and `agentd person erase USER`: a data-subject request, across every agent.

Beside a running daemon both go through it (GET /people/{user}/export, DELETE /people/{user}): it
owns the data and its hot caches must let go of what is erased. With none, they run here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import quote

from agentd.cli.audit import private_file
from agentd.cli.remote import answer, running_daemon
from agentd.cli.settings import settings_of
from agentd.daemon.people import erase_person, export_person
from agentd.daemon.resources import Resources
from agentd.errors import AgentdError


def _no_agent(name: str) -> None:
    return None


def _partial(what: str, failed: dict[str, str]) -> None:
    if failed:
        stores = "; ".join(f"{name}: {reason}" for name, reason in sorted(failed.items()))
        raise AgentdError(f"{what} could not reach every agent's data ({stores}); run it again")


def cmd_person_export(args: argparse.Namespace) -> int:
    with running_daemon(args) as client:
        if client is not None:
            document: dict[str, Any] = answer(client.get(f"/people/{quote(args.user_id, safe='')}/export"))
        else:

            async def go() -> dict[str, Any]:
                async with Resources(settings_of(args), args.data) as resources:
                    return await export_person(resources, _no_agent, None, args.user_id)

            document = asyncio.run(go())
            _partial("the export", document.pop("failed"))
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
    with running_daemon(args) as client:
        if client is not None:
            result: dict[str, Any] = answer(client.delete(f"/people/{quote(args.user_id, safe='')}"))
        else:

            async def go() -> dict[str, Any]:
                async with Resources(settings_of(args), args.data) as resources:
                    return await erase_person(resources, _no_agent, None, args.user_id, "cli")

            result = asyncio.run(go())
            _partial("the erasure", result.pop("failed"))
    for name, counts in sorted(result["erased"].items()):
        print(f"{name}: " + ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())))
    if not result["erased"]:
        print(f"nothing held about {args.user_id}")
    subject = result["subject"]
    print(f"audited as subject scrypt {subject['scrypt']} (salt {subject['salt']}), not the id")
    return 0
