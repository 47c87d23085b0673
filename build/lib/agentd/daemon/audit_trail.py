"""Every audit chain of a data folder (or database): verified, or exported for an auditor.

Each store holds one chain (agentd/store/audit_chain.py): one per agent that ever stored anything,
its file still there or not, and the daemon's own (`_daemon`). Both jobs only read, page by page,
so they run beside a running daemon (the CLI opens the stores read-only).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agentd.daemon.resources import Resources
from agentd.errors import StoreError
from agentd.store.audit_chain import ChainWalk, Verdict
from agentd.store.base import Store
from agentd.store.queries import AuditHead, AuditTrail

PAGE = 5000


async def chain_names(resources: Resources, only: str | None = None) -> list[str]:
    """The stores to look at: every one holding data, or only `only` (which must hold some)."""
    names = await resources.stored_names()
    if only is None:
        return names
    if only not in names:
        raise LookupError(
            f"no audit trail of {only!r}: it has stored nothing (stores: {', '.join(names) or 'none'})"
        )
    return [only]


async def _events(store: Store, since: float | None = None) -> AsyncIterator[list[dict[str, Any]]]:
    after = 0
    while True:
        page = await store.read(AuditTrail(after, PAGE, since))
        if not page:
            return
        yield page
        after = page[-1]["seq"]
        if len(page) < PAGE:
            return


async def verify_store(store: Store, chain: str) -> Verdict:
    """Walk one chain from its first event to its head; the verdict names the first broken event."""
    head = await store.read(AuditHead())
    walk = ChainWalk(chain)
    async for page in _events(store):
        for event in page:
            if not walk.feed(event):
                return walk.end(head)
    return walk.end(head)


async def verify_chains(resources: Resources, only: str | None = None) -> list[Verdict]:
    verdicts = []
    for name in await chain_names(resources, only):
        store = resources.store(name, readonly=True)
        try:
            await store.open()
            verdicts.append(await verify_store(store, name))
        except StoreError as e:
            verdicts.append(Verdict(name, 0, None, None, None, unreadable=_unreadable(e)))
        finally:
            await store.close()
    return verdicts


def _unreadable(error: StoreError) -> str:
    if "no such column: seq" in str(error) or "no such table: audit_chain" in str(error):
        return (
            "written by an earlier agentd and not opened since: its events are sealed into the chain "
            "when the agent next opens its data (its next message)"
        )
    return f"cannot be read: {error}"


def export_line(chain: str, event: dict[str, Any]) -> str:
    """One event as a line of the export: everything the offline verifier (docs/verify_audit.py) needs."""
    return json.dumps({"chain": chain, **event}, ensure_ascii=False, separators=(",", ":"))


async def export_chains(
    resources: Resources, write: Callable[[str], Any], since: float | None = None, only: str | None = None
) -> dict[str, int]:
    """Write each chain's events (from the first at or after `since`) as JSON lines, chain after chain;
    returns how many events of each chain were written."""
    written: dict[str, int] = {}
    for name in await chain_names(resources, only):
        store = resources.store(name, readonly=True)
        await store.open()
        try:
            count = 0
            async for page in _events(store, since):
                for event in page:
                    write(export_line(name, event) + "\n")
                count += len(page)
            written[name] = count
        finally:
            await store.close()
    return written
