"""Scheduled jobs, their fires and deliveries in an agent's file (agentd/store/job_records.py)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from typing import Any

from agentd.store.job_queries import (
    DueDeliveries,
    DueJobs,
    JobById,
    JobDeliveries,
    JobFires,
    JobNamed,
    Jobs,
    JobTotals,
    NextDeliveryAt,
    NextFireAt,
    PersonJobs,
)
from agentd.store.job_records import DELIVERY_ROW, FIRE_ROW, JOB_ROW, DeliveryRecord, FireRecord, JobRecord
from agentd.store.job_writes import (
    CompleteFire,
    DeletePersonJobs,
    DeliveryAttempt,
    InsertDelivery,
    InsertJob,
    UpdateJob,
)
from agentd.store.sqlite.handlers import handles
from agentd.store.writes import RowMissing

_JOBS = f"SELECT {JOB_ROW.columns} FROM jobs"
_DELIVERIES = f"SELECT {DELIVERY_ROW.columns} FROM job_deliveries"
# a person's jobs: asked with their platform id, or owned by their person (or account)
_THEIRS = "(user_id = ? OR owner = ?)"


def _jobs(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[JobRecord]:
    return [JOB_ROW.record_of(row) for row in conn.execute(sql, args)]


def _deliveries(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[DeliveryRecord]:
    return [DELIVERY_ROW.record_of(row) for row in conn.execute(sql, args)]


@handles(NextFireAt)
def next_fire_at(conn: sqlite3.Connection, q: NextFireAt) -> float | None:
    row = conn.execute(
        "SELECT min(next_fire_at) FROM jobs WHERE status = 'active' AND next_fire_at IS NOT NULL"
    ).fetchone()
    return None if row[0] is None else float(row[0])


@handles(DueJobs)
def due_jobs(conn: sqlite3.Connection, q: DueJobs) -> list[JobRecord]:
    return _jobs(
        conn,
        _JOBS + " WHERE status = 'active' AND next_fire_at IS NOT NULL AND next_fire_at <= ?"
        " ORDER BY next_fire_at LIMIT ?",
        (q.now, q.limit),
    )


@handles(JobById)
def job_by_id(conn: sqlite3.Connection, q: JobById) -> JobRecord | None:
    found = _jobs(conn, _JOBS + " WHERE id = ?", (q.id,))
    return found[0] if found else None


@handles(JobNamed)
def job_named(conn: sqlite3.Connection, q: JobNamed) -> JobRecord | None:
    found = _jobs(conn, _JOBS + " WHERE name = ?", (q.name,))
    return found[0] if found else None


@handles(Jobs)
def jobs(conn: sqlite3.Connection, q: Jobs) -> list[JobRecord]:
    where, args = ["1 = 1"], []
    if q.conversation_key is not None:
        where.append("conversation_key = ?")
        args.append(q.conversation_key)
    if q.owner is not None:
        where.append("owner = ?")
        args.append(q.owner)
    if not q.ended:
        where.append("status IN ('active', 'paused')")
    if q.named:
        where.append("name IS NOT NULL")
    sql = f"{_JOBS} WHERE {' AND '.join(where)} ORDER BY created_at, id LIMIT ?"
    return _jobs(conn, sql, (*args, q.limit))


@handles(JobFires)
def job_fires(conn: sqlite3.Connection, q: JobFires) -> list[FireRecord]:
    rows = conn.execute(
        f"SELECT {FIRE_ROW.columns} FROM job_fires WHERE job_id = ? ORDER BY started_at DESC LIMIT ?",
        (q.job_id, q.limit),
    )
    return [FIRE_ROW.record_of(row) for row in rows]


@handles(JobDeliveries)
def job_deliveries(conn: sqlite3.Connection, q: JobDeliveries) -> list[DeliveryRecord]:
    sql = _DELIVERIES + " WHERE (? IS NULL OR job_id = ?) AND (? IS NULL OR status = ?)"
    return _deliveries(
        conn, sql + " ORDER BY created_at DESC LIMIT ?", (q.job_id, q.job_id, q.status, q.status, q.limit)
    )


@handles(DueDeliveries)
def due_deliveries(conn: sqlite3.Connection, q: DueDeliveries) -> list[DeliveryRecord]:
    sql = _DELIVERIES + " WHERE status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?"
    return _deliveries(conn, sql, (q.now, q.limit))


@handles(NextDeliveryAt)
def next_delivery_at(conn: sqlite3.Connection, q: NextDeliveryAt) -> float | None:
    row = conn.execute("SELECT min(next_attempt_at) FROM job_deliveries WHERE status = 'pending'").fetchone()
    return None if row[0] is None else float(row[0])


@handles(JobTotals)
def job_totals(conn: sqlite3.Connection, q: JobTotals) -> dict[str, int]:
    out = {f"jobs_{s}": n for s, n in conn.execute("SELECT status, count(*) FROM jobs GROUP BY status")}
    rows = conn.execute("SELECT status, count(*) FROM job_deliveries GROUP BY status")
    return out | {f"deliveries_{s}": n for s, n in rows}


@handles(PersonJobs)
def person_jobs(conn: sqlite3.Connection, q: PersonJobs) -> dict[str, list[dict[str, Any]]]:
    theirs = _jobs(conn, f"{_JOBS} WHERE {_THEIRS} ORDER BY created_at, id", (q.user_id, q.user_id))
    waiting = _deliveries(
        conn,
        f"{_DELIVERIES} WHERE {_THEIRS} AND status = 'pending' ORDER BY created_at",
        (q.user_id, q.user_id),
    )
    return {"jobs": [asdict(j) for j in theirs], "deliveries": [asdict(d) for d in waiting]}


@handles(InsertJob)
def insert_job(conn: sqlite3.Connection, op: InsertJob) -> None:
    conn.execute(
        f"INSERT INTO jobs ({JOB_ROW.columns}) VALUES ({JOB_ROW.marks('?')})", JOB_ROW.values(op.job)
    )


@handles(UpdateJob)
def update_job(conn: sqlite3.Connection, op: UpdateJob) -> None:
    sets = ", ".join(f"{name} = ?" for name in JOB_ROW.names[1:])
    values = JOB_ROW.values(op.job)
    if conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*values[1:], values[0])).rowcount != 1:
        raise RowMissing(f"no job {op.job.id}")


@handles(CompleteFire)
def complete_fire(conn: sqlite3.Connection, op: CompleteFire) -> None:
    fire = op.fire
    inserted = conn.execute(
        f"INSERT OR IGNORE INTO job_fires ({FIRE_ROW.columns}) VALUES ({FIRE_ROW.marks('?')})",
        FIRE_ROW.values(fire),
    ).rowcount
    if fire.trigger == "manual":
        moved = conn.execute(
            "UPDATE jobs SET failures = ?, status = ?, paused_reason = ?, updated_at = ? WHERE id = ?",
            (op.failures, op.status, op.paused_reason, op.now, fire.job_id),
        ).rowcount
    else:
        moved = conn.execute(
            "UPDATE jobs SET next_fire_at = ?, failures = ?, status = ?, paused_reason = ?, updated_at = ?"
            " WHERE id = ? AND next_fire_at = ?",
            (op.next_fire_at, op.failures, op.status, op.paused_reason, op.now, fire.job_id, fire.fire_at),
        ).rowcount
    if inserted != 1 or moved != 1:
        raise RowMissing(
            f"job {fire.job_id}'s fire at {fire.fire_at} was recorded already or the job changed"
        )


@handles(InsertDelivery)
def insert_delivery(conn: sqlite3.Connection, op: InsertDelivery) -> None:
    conn.execute(
        f"INSERT INTO job_deliveries ({DELIVERY_ROW.columns}) VALUES ({DELIVERY_ROW.marks('?')})",
        DELIVERY_ROW.values(op.delivery),
    )


@handles(DeliveryAttempt)
def delivery_attempt(conn: sqlite3.Connection, op: DeliveryAttempt) -> None:
    conn.execute(
        "UPDATE job_deliveries SET status = ?, attempts = ?, next_attempt_at = ?, sent_at = ?, last_error = ?"
        " WHERE id = ? AND status = 'pending'",
        (op.status, op.attempts, op.next_attempt_at, op.sent_at, op.error, op.id),
    )


@handles(DeletePersonJobs)
def delete_person_jobs(conn: sqlite3.Connection, op: DeletePersonJobs) -> dict[str, int]:
    ids = [row[0] for row in conn.execute(f"SELECT id FROM jobs WHERE {_THEIRS}", (op.user_id, op.user_id))]
    deliveries = conn.execute(
        f"DELETE FROM job_deliveries WHERE {_THEIRS} OR job_id IN (SELECT value FROM json_each(?))",
        (op.user_id, op.user_id, _json_list(ids)),
    ).rowcount
    conn.execute("DELETE FROM job_fires WHERE job_id IN (SELECT value FROM json_each(?))", (_json_list(ids),))
    conn.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))", (_json_list(ids),))
    return {"jobs": len(ids), "deliveries": deliveries}


def _json_list(values: list[str]) -> str:
    return json.dumps(values)
