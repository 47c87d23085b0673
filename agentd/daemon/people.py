"""A person's data across every agent of a data folder (or database): exported, or erased.

Every store that holds data is visited: the running agents' through the agents themselves (their hot
caches are theirs to drop), the others — an agent whose file was removed or rejected, or every agent
when the CLI runs with no daemon — through their store alone, and the daemon's own trail last, where
one event records the whole erasure. `agentd person …`, `GET /people/{user_id}/export` and `DELETE
/people/{user_id}` all end here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from agentd.daemon.resources import DAEMON_STORE, Resources
from agentd.engine.agent import Agent
from agentd.engine.linking import People
from agentd.engine.people import audit_memory_clashes
from agentd.errors import AgentdError
from agentd.memory.erasure import layer_erasure
from agentd.store.base import Store, write_one
from agentd.store.budget_queries import PersonUsage
from agentd.store.people import subject_of
from agentd.store.queries import PersonData
from agentd.store.records import Linked
from agentd.store.writes import ErasePerson

if TYPE_CHECKING:
    from agentd.daemon.fleet import Fleet

DAEMON_AGENT = "daemon"  # the agent column of the daemon's own events (agentd.daemon.Daemon.daemon_audit)
Running = Callable[[str], Agent | None]


def holds_anything(data: dict[str, Any] | None) -> bool:
    return data is not None and any(data.values())


async def export_person(
    resources: Resources, running: Running, own: Store | None, user_id: str
) -> dict[str, Any]:
    """One document: per agent (and `_daemon`) that holds anything of theirs, what it holds, each item
    with its conversation. `own` is the daemon's open store (None: open it here)."""
    agents: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name in await resources.stored_names():
        agent = running(name)
        try:
            if agent is not None:
                data = await agent.person_data(user_id)
            elif name == DAEMON_STORE and own is not None:
                data = await own.read(PersonData(user_id))
            else:
                # (opened as a daemon would: a file from before this version is migrated first)
                data = await _with_store(resources, name, lambda store: store.read(PersonData(user_id)))
        except AgentdError as e:
            failed[name] = str(e)
            continue
        if holds_anything(data):
            agents[name] = data
    usage = await _usage_of(resources, own, user_id)
    return {
        "user_id": user_id,
        "exported_at": time.time(),
        "agents": agents,
        "usage": usage,
        "failed": failed,
    }


async def _usage_of(resources: Resources, own: Store | None, user_id: str) -> list[dict[str, Any]]:
    """Their usage rows (the daemon's own store counts every agent's), each as a mapping."""
    query = PersonUsage(user_id)
    rows = (
        await own.read(query)
        if own is not None
        else await _with_store(resources, DAEMON_STORE, lambda s: s.read(query))
    )
    return [asdict(row) for row in rows]


async def erase_person(
    resources: Resources, running: Running, own: Store | None, user_id: str, by: str
) -> dict[str, Any]:
    """Erase the person everywhere; returns the counts per agent and the subject recorded (a salted hash
    of the id). Each agent's trail gets one event with its counts; the daemon's gets one with all."""
    subject = subject_of(user_id)
    erased: dict[str, dict[str, int]] = {}
    failed: dict[str, str] = {}
    for name in await resources.stored_names():
        if name == DAEMON_STORE:
            continue
        try:
            counts = await _erase_in(resources, running(name), name, user_id, subject, by)
        except AgentdError as e:
            failed[name] = str(e)
            continue
        if counts:
            erased[name] = counts
    record: dict[str, Any] = {"agents": erased, **({"failed": sorted(failed)} if failed else {})}
    summary = _erasure(DAEMON_AGENT, user_id, subject, by, record=record)
    if own is not None:
        daemon_counts = await write_one(own, summary)
    else:
        daemon_counts = await _with_store(resources, DAEMON_STORE, lambda store: write_one(store, summary))
    if daemon_counts:
        erased[DAEMON_STORE] = daemon_counts
    return {"user_id": user_id, "subject": subject, "erased": erased, "failed": failed}


async def _erase_in(
    resources: Resources, agent: Agent | None, name: str, user_id: str, subject: dict[str, Any], by: str
) -> dict[str, int]:
    if agent is not None:
        return await agent.erase_person(user_id, subject, by)
    op = _erasure(name, user_id, subject, by)
    counts = await _with_store(resources, name, lambda store: write_one(store, op))
    return dict(counts)


def _erasure(
    agent: str, user_id: str, subject: dict[str, Any], by: str, record: dict[str, Any] | None = None
) -> ErasePerson:
    return ErasePerson(
        agent,
        user_id,
        subject,
        by,
        time.time(),
        None,
        layer_erasure().rebuild,
        layer_erasure().drop,
        record,
    )


async def _with_store(resources: Resources, name: str, job: Callable[[Store], Any]) -> Any:
    store = resources.store(name)
    await store.open()
    try:
        return await job(store)
    finally:
        await store.close()


# -- linked accounts: one person ---------------------------------------------------------------------


async def attach_people(
    people: People, store: Store, declared: Mapping[str, list[str]], running: Fleet
) -> None:
    """Keep links in the daemon's store, link what agentd.yaml declares, and after each link audit in
    every running agent the persistent keys the linked accounts both held."""
    people.attach(store)

    async def merged(linked: Linked) -> None:
        for name in list(running.entries):
            agent = running.agent(name)
            if agent is not None:
                await agent.audit_merged_memories(linked)

    people.on_link.append(merged)
    await people.declare(declared)


async def audit_merged_in_stores(resources: Resources, linked: Linked) -> dict[str, list[str]]:
    """With no daemon running (`agentd person link`): audit in every agent's store the persistent keys
    the linked accounts both held, as a daemon's link does in its running agents; the keys per agent."""
    merged: dict[str, list[str]] = {}
    for name in await resources.stored_names():
        if name == DAEMON_STORE:
            continue

        async def audit(store: Store, agent: str = name) -> list[str]:
            return await audit_memory_clashes(store, agent, linked)

        keys = await _with_store(resources, name, audit)
        if keys:
            merged[name] = keys
    return merged


async def ids_of(people: People, name: str) -> tuple[list[str], Linked | None]:
    """The ids a data-subject request for `name` covers: a linked person's every account's user id
    and the person's name (what their audit events of links hold), or `name` alone."""
    linked = await people.find(name)
    if linked is None:
        return [name], None
    ids = sorted({account.split(":", 1)[1] for account in linked.accounts})
    return [*ids, linked.person], linked


async def export_linked(
    resources: Resources, running: Running, own: Store | None, people: People, name: str
) -> dict[str, Any]:
    """export_person for a person with linked accounts: every account's data, per agent one document
    (the lists of each account's part joined), with the person and their accounts; else as before."""
    ids, linked = await ids_of(people, name)
    documents = [await export_person(resources, running, own, user_id) for user_id in ids]
    if linked is None:
        return documents[0]
    agents: dict[str, dict[str, Any]] = {}
    for document in documents:
        for agent, data in document["agents"].items():
            joined = agents.setdefault(agent, {key: [] for key in data})
            for key, items in data.items():
                joined.setdefault(key, []).extend(items)
    failed = {k: v for document in documents for k, v in document["failed"].items()}
    return {
        "user_id": name,
        "person": linked.person,
        "accounts": list(linked.accounts),
        "exported_at": time.time(),
        "agents": agents,
        "failed": failed,
    }


async def erase_linked(
    resources: Resources, running: Running, own: Store | None, people: People, name: str, by: str
) -> dict[str, Any]:
    """erase_person for a person with linked accounts: their links and codes go first (so the erasure
    that follows finds the audit events of those links too), then every account's user id and the
    person's name are erased everywhere; counts are summed per agent and kind."""
    ids, linked = await ids_of(people, name)
    if linked is None:
        return await erase_person(resources, running, own, name, by)
    await people.drop(linked)
    results = [await erase_person(resources, running, own, user_id, by) for user_id in ids]
    erased: dict[str, dict[str, int]] = {}
    for result in results:
        for agent, counts in result["erased"].items():
            total = erased.setdefault(agent, {})
            for kind, n in counts.items():
                total[kind] = total.get(kind, 0) + n
    return {
        "user_id": name,
        "accounts": len(linked.accounts),
        "subject": results[0]["subject"],
        "subjects": [result["subject"] for result in results],
        "erased": erased,
        "failed": {k: v for result in results for k, v in result["failed"].items()},
    }
