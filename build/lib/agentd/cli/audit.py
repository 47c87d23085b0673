"""`agentd audit verify [AGENT]` and `agentd audit export [--since T]`: the hash chains, read-only.

Both read the stores directly (read-only: safe beside a running daemon) and never write.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from agentd.cli.settings import settings_of
from agentd.daemon.audit_trail import export_chains, verify_chains
from agentd.daemon.resources import Resources
from agentd.errors import AgentdError
from agentd.http.bodies import epoch_seconds
from agentd.store.audit_chain import Verdict


def cmd_audit_verify(args: argparse.Namespace) -> int:
    """Verify every chain (or AGENT's); print each chain's head to keep; exit 1 when one is broken."""

    async def go() -> list[Verdict]:
        async with Resources(settings_of(args), args.data) as resources:
            return await verify_chains(resources, args.name)

    try:
        verdicts = asyncio.run(go())
    except LookupError as e:
        raise AgentdError(str(e.args[0])) from None
    if args.json:
        print(json.dumps([v.as_dict() for v in verdicts], indent=2))
    else:
        for verdict in verdicts:
            print(describe(verdict))
        if not verdicts:
            print(f"no audit trail in {args.data}")
        elif all(v.ok for v in verdicts):
            print(
                "Keep these heads somewhere agentd cannot write: a later verify proves each chain still "
                "holds its head at that seq; only such a comparison catches a trail cut short or recomputed."
            )
    return 0 if all(v.ok for v in verdicts) else 1


def describe(verdict: Verdict) -> str:
    if verdict.unreadable is not None:
        return f"{verdict.chain}: NOT VERIFIED: {verdict.unreadable}"
    if not verdict.ok:
        return f"{verdict.chain}: BROKEN at event {verdict.broken}: {verdict.reason}"
    if verdict.last is None:
        return f"{verdict.chain}: ok, no events"
    seq, digest = verdict.last
    return f"{verdict.chain}: ok, {verdict.events} events; head {seq} {digest}"


def cmd_audit_export(args: argparse.Namespace) -> int:
    """Every chain (or --agent's) as JSON lines, from the first event at or after --since."""
    since = None
    if args.since is not None:
        try:
            since = epoch_seconds(args.since, numeric_text=True)
        except ValueError as e:
            raise AgentdError(f"--since: {e}") from None

    async def go(out: TextIO) -> dict[str, int]:
        async with Resources(settings_of(args), args.data) as resources:
            return await export_chains(resources, out.write, since, args.agent)

    try:
        if args.output is None:
            written = asyncio.run(go(sys.stdout))
        else:
            with private_file(args.output) as out:
                written = asyncio.run(go(out))
    except LookupError as e:
        raise AgentdError(str(e.args[0])) from None
    summary = ", ".join(f"{chain} {count}" for chain, count in written.items()) or "no chains"
    print(f"exported: {summary}", file=sys.stderr)
    return 0


def private_file(path: Path) -> Any:
    """The export holds what the trail holds: readable by its owner only, as the data files are."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    return path.open("w", encoding="utf-8")
