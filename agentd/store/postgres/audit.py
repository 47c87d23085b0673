"""The audit trail on PostgreSQL: one hash chain per agent (agentd/store/audit_chain.py says what each
hash covers), the daemon's own trail (`_daemon`) being one too.

With several daemons appending to one agent's chain, appends are serialized by the chain's head row
(`audit_chains`): each event is one statement that moves the head — locking its row until the
transaction ends — and inserts the event with the seq and hashes it got. Python seals the event's
content (nonces, commitments, digest); the database links it (`sha256(prev ‖ int8send(seq) ‖
digest)`), so nothing is read back before the batch ends and a turn's batch stays one round trip.
A second daemon appending to the same chain waits for the first one's commit, never interleaves.
"""

from __future__ import annotations

from typing import Any

import psycopg

from agentd.store.audit_chain import (
    EVENT_COLUMNS,
    GENESIS,
    TRAIL_COLUMNS,
    hex_of,
    listed_event,
    seal,
    seal_existing,
    stored_event,
)
from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.queries import AuditEvents, AuditHead, AuditTrail
from agentd.store.writes import AppendAudit

_APPEND = (
    "WITH link AS ("
    " INSERT INTO audit_chains AS c (agent_id, seq, head, prev)"
    " VALUES (%(agent_id)s, 1, sha256(%(genesis)s || int8send(1::bigint) || %(digest)s), %(genesis)s)"
    " ON CONFLICT (agent_id) DO UPDATE"
    " SET seq = c.seq + 1, prev = c.head, head = sha256(c.head || int8send(c.seq + 1) || %(digest)s)"
    " RETURNING seq, prev, head)"
    " INSERT INTO audit (agent_id, ts, agent, kind, action, conversation_key, run_id, data, daemon, seq,"
    " salts, prev_hash, hash)"
    " SELECT %(agent_id)s, %(ts)s, %(agent)s, %(kind)s, %(action)s, %(key)s, %(run_id)s, %(data)s,"
    " %(daemon)s, link.seq, %(salts)s, link.prev, link.head FROM link"
)


@handles(AppendAudit)
def insert_audit(cx: Cx, op: AppendAudit) -> None:
    """One statement per event (a row is moved once per statement), pipelined with the batch."""
    for r in op.records:
        sealed = seal(r, op.ts, op.agent, op.daemon)
        params = {
            "agent_id": cx.agent_id,
            "genesis": GENESIS,
            "digest": sealed.digest,
            "ts": op.ts,
            "agent": op.agent,
            "kind": r.kind,
            "action": r.action,
            "key": r.conversation_key,
            "run_id": r.run_id,
            "data": sealed.data,
            "daemon": op.daemon,
            "salts": sealed.salts,
        }
        cx.conn.execute(_APPEND, params)


def seal_unchained(conn: psycopg.Connection[Any]) -> None:
    """Migration step: chain every agent's events written before the chain existed, in the order written."""
    agents = [row[0] for row in conn.execute("SELECT DISTINCT agent_id FROM audit WHERE seq IS NULL")]
    for agent_id in agents:
        rows = conn.execute(
            "SELECT id, ts, agent, kind, action, conversation_key, run_id, data, daemon FROM audit"
            " WHERE agent_id = %s AND seq IS NULL ORDER BY id",
            (agent_id,),
        ).fetchall()
        sealed = seal_existing((row[1:] for row in rows), 0, GENESIS)
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE audit SET seq = %s, data = %s, salts = %s, prev_hash = %s, hash = %s WHERE id = %s",
                [(*chained, row[0]) for chained, row in zip(sealed, rows, strict=True)],
            )
        last = sealed[-1]
        conn.execute(
            "INSERT INTO audit_chains (agent_id, seq, head, prev) VALUES (%s, %s, %s, %s)",
            (agent_id, last[0], last[4], last[3]),
        )


@handles(AuditEvents)
def query_audit(cx: Cx, q: AuditEvents) -> Later[list[dict[str, Any]]]:
    clauses = ["agent_id = %s", *(f"{column} {op} %s" for column, op, _ in q.conditions())]
    args = [cx.agent_id, *(value for _, _, value in q.conditions())]
    if q.tool is not None:
        clauses.append("(data::jsonb ->> 'tool') = %s")
        args.append(q.tool)
    cur = cx.run(
        f"SELECT {EVENT_COLUMNS} FROM audit WHERE {' AND '.join(clauses)} ORDER BY ts DESC, id DESC LIMIT %s",
        (*args, q.limit),
    )
    return Later(lambda: [listed_event(row) for row in reversed(cur.fetchall())])


@handles(AuditTrail)
def audit_trail(cx: Cx, q: AuditTrail) -> Later[list[dict[str, Any]]]:
    where, args = "agent_id = %s AND seq > %s", list[Any]([cx.agent_id, q.after_seq])
    if q.since is not None:
        where += " AND seq >= (SELECT min(seq) FROM audit WHERE agent_id = %s AND ts >= %s)"
        args += [cx.agent_id, q.since]
    cur = cx.run(f"SELECT {TRAIL_COLUMNS} FROM audit WHERE {where} ORDER BY seq LIMIT %s", (*args, q.limit))
    return Later(lambda: [stored_event(row) for row in cur.fetchall()])


@handles(AuditHead)
def audit_head(cx: Cx, q: AuditHead) -> Later[tuple[int, str] | None]:
    cur = cx.run("SELECT seq, head FROM audit_chains WHERE agent_id = %s", (cx.agent_id,))

    def read() -> tuple[int, str] | None:
        row = cur.fetchone()
        return None if row is None else (int(row[0]), hex_of(row[1]))

    return Later(read)
