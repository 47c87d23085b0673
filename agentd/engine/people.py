"""A person's data in one running agent: exported, or erased together with every hot copy of it.

Erasing waits for what runs in the person's conversations (their turns, their memory work) and holds
them while the erasure commits, so no turn writes after it and no hot thread outlives it: their own
conversations start afresh, shared ones are read again (with the tombstones). Runs paused for an
approval they asked for, or in their conversations, are refused first: a paused run holds its
conversation, and would write the person's exchange after the erasure otherwise. (A run paused in a
shared conversation by someone else is theirs to decide: the erasure waits for it, as a message would.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from agentd.engine.approvals import OPERATOR, Approvals
from agentd.engine.state import AgentState
from agentd.memory.erasure import layer_erasure
from agentd.memory.vectors import index_cache
from agentd.store.base import Store
from agentd.store.job_queries import PersonJobs
from agentd.store.job_writes import DeletePersonJobs
from agentd.store.people import names, partition_of
from agentd.store.queries import Memories, PersonConversations, PersonData
from agentd.store.records import AuditRecord, Linked
from agentd.store.writes import AppendAudit, ErasePerson

APPROVAL_ROUNDS = 3  # a refused run may ask again: refused again, a few times over


async def audit_merged_memories(state: AgentState, linked: Linked) -> list[str]:
    """Accounts just linked that held the same persistent key: the person now reads the newer value
    (agentd/memory/persistent.py); each such key is audited, with the scope kept and those it is over."""
    memory = state.spec.memory
    if not memory.persistent or memory.persistent_scope != "user":
        return []
    scopes = sorted({partition_of(account.split(":", 1)[1]) for account in linked.accounts})
    held: dict[str, int] = {}
    for scope in scopes:  # (the hot copy first: a clash is rare, the store is read only for one)
        for key in state.persistent.keys(scope):
            held[key] = held.get(key, 0) + 1
    if all(n == 1 for n in held.values()):
        return []
    return await audit_memory_clashes(state.store, state.name, linked)


async def audit_memory_clashes(store: Store, agent: str, linked: Linked) -> list[str]:
    """Audit in `agent`'s trail each persistent key more than one of the linked accounts held (the
    newest value is the person's: `{kind: memory, action: merge, data: {key, scope, over}}`); the keys.
    Also what `agentd person link` runs on every agent's store when no daemon does."""
    scopes = sorted({partition_of(account.split(":", 1)[1]) for account in linked.accounts})
    rows = [m for scope in scopes for m in await store.read(Memories(scope))]
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault(row["key"], []).append(row)
    clashes = {key: found for key, found in by_key.items() if len(found) > 1}
    if not clashes:
        return []
    audits = []
    for key, found in sorted(clashes.items()):
        newest = max(found, key=lambda m: m["updated_at"])
        over = sorted(m["scope"] for m in found if m["scope"] != newest["scope"])
        audits.append(
            AuditRecord("memory", "merge", None, None, {"key": key, "scope": newest["scope"], "over": over})
        )
    await store.write(AppendAudit(agent, audits, time.time()))
    return sorted(clashes)


async def person_data(state: AgentState, user_id: str) -> dict[str, Any]:
    data, jobs = await state.store.read_many(PersonData(user_id), PersonJobs(user_id))
    return {**data, **jobs} if jobs["jobs"] or jobs["deliveries"] else data


async def erase_person(
    state: AgentState, approvals: Approvals, user_id: str, subject: Mapping[str, Any], by: str
) -> dict[str, int]:
    """Erase the person from this agent (agentd.store.writes.ErasePerson); returns the counts per kind."""
    await _refuse_their_approvals(state, approvals, user_id)
    found = await state.store.read(PersonConversations(user_id))
    conversations = sorted({*found["theirs"], *found["shared"]})
    async with contextlib.AsyncExitStack() as held:
        for key in conversations:  # in one order everywhere: two erasures never wait on each other
            await held.enter_async_context(state.locks.hold(key))
            await held.enter_async_context(state.memory_locks.hold(key))
            await held.enter_async_context(state.store.claim(key))
        op = ErasePerson(
            state.name,
            user_id,
            subject,
            by,
            time.time(),
            conversations,
            layer_erasure().rebuild,
            layer_erasure().drop,
        )
        # their scheduled jobs and every delivery made for them go in the same batch
        counts, jobs = await state.store.write(op, DeletePersonJobs(user_id))
        counts = {**counts, **{f"job_{kind}": n for kind, n in jobs.items() if n}}
        for key in conversations:  # read again at its next turn: gone, or with tombstones and layers rebuilt
            state.threads.forget(key)
            state.chosen_models.pop(key, None)
    index_cache(state.store).drop(partition_of(user_id))
    await state.persistent.load()  # their persistent keys are gone from every prompt
    return dict(counts)


async def _refuse_their_approvals(state: AgentState, approvals: Approvals, user_id: str) -> None:
    for _ in range(APPROVAL_ROUNDS):
        theirs = [r for r in state.waiting_approvals.values() if names(r.requested_by, user_id)]
        if not theirs:
            return
        for record in theirs:
            await approvals.decide(record.id, False, OPERATOR)
