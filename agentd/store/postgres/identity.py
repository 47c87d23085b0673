"""The identity rows: what each agent's data belongs to (agent name, creation time), on PostgreSQL."""

from __future__ import annotations

from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.writes import EnsureIdentity


@handles(EnsureIdentity)
def ensure_identity(cx: Cx, op: EnsureIdentity) -> Later[dict[str, str]]:
    cx.run(
        "INSERT INTO identity (agent_id, key, value) SELECT %s, x.key, x.value"
        " FROM unnest(%s::text[], %s::text[]) AS x(key, value) ON CONFLICT DO NOTHING",
        (cx.agent_id, list(op.values), list(op.values.values())),
    )
    cur = cx.run("SELECT key, value FROM identity WHERE agent_id = %s", (cx.agent_id,))
    return Later(lambda: dict(cur.fetchall()))
