"""Persistent memories by (scope, key), on PostgreSQL.

Every memory write moves the agent's `memories_version`, which each claim reports: a daemon reads the
keys again only when another one changed them.
"""

from __future__ import annotations

from typing import Any

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import Memories, MemoryKeys, MemoryValue
from agentd.store.writes import DeleteMemory, RowMissing, UpsertMemory

_BUMP = "UPDATE agents SET memories_version = memories_version + 1 WHERE id = %s"


@handles(UpsertMemory)
def upsert_memory(cx: Cx, op: UpsertMemory) -> Later[bool]:
    # xmax = 0 on the returned row: it was inserted, not updated (the key is new)
    cur = cx.run(
        "INSERT INTO memories (agent_id, scope, key, value, created_at, updated_at, run_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id, scope, key) DO UPDATE"
        " SET value = excluded.value, updated_at = excluded.updated_at, run_id = excluded.run_id"
        " RETURNING xmax = 0",
        (cx.agent_id, op.scope, op.key, op.value, op.now, op.now, op.run_id),
    )
    cx.run(_BUMP, (cx.agent_id,))
    return Later(lambda: bool(_first(cur.fetchone())))


@handles(DeleteMemory, reads_midway=lambda op: op.must_exist)
def delete_memory(cx: Cx, op: DeleteMemory) -> Any:
    cur = cx.run(
        "DELETE FROM memories WHERE agent_id = %s AND scope = %s AND key = %s RETURNING 1",
        (cx.agent_id, op.scope, op.key),
    )
    cx.run(_BUMP, (cx.agent_id,))
    if op.must_exist:  # refusing rolls the batch back: the answer is needed now (a round trip)
        if not cur.fetchall():
            raise RowMissing(f"no memory with key {op.key!r}")
        return True
    return Later(lambda: bool(cur.fetchall()))


@handles(MemoryValue)
def get_memory(cx: Cx, q: MemoryValue) -> Later[str | None]:
    cur = cx.run(
        "SELECT value FROM memories WHERE agent_id = %s AND scope = %s AND key = %s",
        (cx.agent_id, q.scope, q.key),
    )
    return Later(lambda: _first(cur.fetchone()))


@handles(MemoryKeys)
def memory_keys(cx: Cx, q: MemoryKeys) -> Later[dict[str, list[str]]]:
    cur = cx.run("SELECT scope, key FROM memories WHERE agent_id = %s ORDER BY scope, key", (cx.agent_id,))

    def read() -> dict[str, list[str]]:
        keys: dict[str, list[str]] = {}
        for scope, key in cur.fetchall():
            keys.setdefault(scope, []).append(key)
        return keys

    return Later(read)


@handles(Memories)
def list_memories(cx: Cx, q: Memories) -> Later[list[dict[str, Any]]]:
    where, args = ("AND scope = %s", [q.scope]) if q.scope is not None else ("", [])
    cur = cx.run(
        "SELECT scope, key, value, created_at, updated_at FROM memories"
        f" WHERE agent_id = %s {where} ORDER BY scope, key",
        (cx.agent_id, *args),
    )
    return Later(
        lambda: [
            {"scope": s, "key": k, "value": v, "created_at": c, "updated_at": u}
            for s, k, v, c, u in cur.fetchall()
        ]
    )


def _first(row: tuple[Any, ...] | None) -> Any:
    return None if row is None else row[0]
