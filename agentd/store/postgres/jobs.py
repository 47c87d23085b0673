"""Scheduled jobs, their fires and deliveries in the shared database, each row scoped to its agent.

A fire is done once across daemons because its row's key is (agent, job, scheduled time) and the
job's next fire moves only from that time (CompleteFire): a daemon that lost the job's lease while
stalled finds both taken and its whole batch (run, delivery) is rolled back.
"""

from __future__ import annotations

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
from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.writes import RowMissing

_JOBS = f"SELECT {JOB_ROW.columns} FROM jobs WHERE agent_id = %s"
_DELIVERIES = f"SELECT {DELIVERY_ROW.columns} FROM job_deliveries WHERE agent_id = %s"
_THEIRS = "(user_id = %s OR owner = %s)"


def _jobs(cx: Cx, sql: str, args: tuple[Any, ...]) -> Later[list[JobRecord]]:
    cur = cx.run(sql, (cx.agent_id, *args))
    return Later(lambda: [JOB_ROW.record_of(row) for row in cur.fetchall()])


def _first(found: Later[list[JobRecord]]) -> Later[JobRecord | None]:
    return Later(lambda: next(iter(found.result()), None))


def _deliveries(cx: Cx, sql: str, args: tuple[Any, ...]) -> Later[list[DeliveryRecord]]:
    cur = cx.run(sql, (cx.agent_id, *args))
    return Later(lambda: [DELIVERY_ROW.record_of(row) for row in cur.fetchall()])


def _number(cx: Cx, sql: str) -> Later[float | None]:
    cur = cx.run(sql, (cx.agent_id,))
    return Later(lambda: None if (row := cur.fetchone()) is None or row[0] is None else float(row[0]))


@handles(NextFireAt)
def next_fire_at(cx: Cx, q: NextFireAt) -> Later[float | None]:
    return _number(
        cx,
        "SELECT min(next_fire_at) FROM jobs"
        " WHERE agent_id = %s AND status = 'active' AND next_fire_at IS NOT NULL",
    )


@handles(DueJobs)
def due_jobs(cx: Cx, q: DueJobs) -> Later[list[JobRecord]]:
    return _jobs(
        cx,
        _JOBS + " AND status = 'active' AND next_fire_at IS NOT NULL AND next_fire_at <= %s"
        " ORDER BY next_fire_at LIMIT %s",
        (q.now, q.limit),
    )


@handles(JobById)
def job_by_id(cx: Cx, q: JobById) -> Later[JobRecord | None]:
    return _first(_jobs(cx, _JOBS + " AND id = %s", (q.id,)))


@handles(JobNamed)
def job_named(cx: Cx, q: JobNamed) -> Later[JobRecord | None]:
    return _first(_jobs(cx, _JOBS + " AND name = %s", (q.name,)))


@handles(Jobs)
def jobs(cx: Cx, q: Jobs) -> Later[list[JobRecord]]:
    where, args = [], []
    if q.conversation_key is not None:
        where.append("conversation_key = %s")
        args.append(q.conversation_key)
    if q.owner is not None:
        where.append("owner = %s")
        args.append(q.owner)
    if not q.ended:
        where.append("status IN ('active', 'paused')")
    if q.named:
        where.append("name IS NOT NULL")
    sql = _JOBS + "".join(f" AND {w}" for w in where) + " ORDER BY created_at, id LIMIT %s"
    return _jobs(cx, sql, (*args, q.limit))


@handles(JobFires)
def job_fires(cx: Cx, q: JobFires) -> Later[list[FireRecord]]:
    cur = cx.run(
        f"SELECT {FIRE_ROW.columns} FROM job_fires WHERE agent_id = %s AND job_id = %s"
        " ORDER BY started_at DESC LIMIT %s",
        (cx.agent_id, q.job_id, q.limit),
    )
    return Later(lambda: [FIRE_ROW.record_of(row) for row in cur.fetchall()])


@handles(JobDeliveries)
def job_deliveries(cx: Cx, q: JobDeliveries) -> Later[list[DeliveryRecord]]:
    sql = _DELIVERIES + " AND (%s::text IS NULL OR job_id = %s) AND (%s::text IS NULL OR status = %s)"
    return _deliveries(
        cx, sql + " ORDER BY created_at DESC LIMIT %s", (q.job_id, q.job_id, q.status, q.status, q.limit)
    )


@handles(DueDeliveries)
def due_deliveries(cx: Cx, q: DueDeliveries) -> Later[list[DeliveryRecord]]:
    sql = _DELIVERIES + " AND status = 'pending' AND next_attempt_at <= %s ORDER BY next_attempt_at LIMIT %s"
    return _deliveries(cx, sql, (q.now, q.limit))


@handles(NextDeliveryAt)
def next_delivery_at(cx: Cx, q: NextDeliveryAt) -> Later[float | None]:
    return _number(
        cx, "SELECT min(next_attempt_at) FROM job_deliveries WHERE agent_id = %s AND status = 'pending'"
    )


@handles(JobTotals, statements=2)
def job_totals(cx: Cx, q: JobTotals) -> Later[dict[str, int]]:
    jobs_cur = cx.run("SELECT status, count(*) FROM jobs WHERE agent_id = %s GROUP BY status", (cx.agent_id,))
    sent_cur = cx.run(
        "SELECT status, count(*) FROM job_deliveries WHERE agent_id = %s GROUP BY status", (cx.agent_id,)
    )

    def read() -> dict[str, int]:
        out = {f"jobs_{s}": int(n) for s, n in jobs_cur.fetchall()}
        return out | {f"deliveries_{s}": int(n) for s, n in sent_cur.fetchall()}

    return Later(read)


@handles(PersonJobs, statements=2)
def person_jobs(cx: Cx, q: PersonJobs) -> Later[dict[str, list[dict[str, Any]]]]:
    theirs = _jobs(cx, f"{_JOBS} AND {_THEIRS} ORDER BY created_at, id", (q.user_id, q.user_id))
    waiting = _deliveries(
        cx, f"{_DELIVERIES} AND {_THEIRS} AND status = 'pending' ORDER BY created_at", (q.user_id, q.user_id)
    )
    return Later(
        lambda: {
            "jobs": [asdict(j) for j in theirs.result()],
            "deliveries": [asdict(d) for d in waiting.result()],
        }
    )


@handles(InsertJob)
def insert_job(cx: Cx, op: InsertJob) -> None:
    cx.run(
        f"INSERT INTO jobs (agent_id, {JOB_ROW.columns}) VALUES (%s, {JOB_ROW.marks('%s')})",
        (cx.agent_id, *JOB_ROW.values(op.job)),
    )


@handles(UpdateJob, reads_midway=lambda op: True)
def update_job(cx: Cx, op: UpdateJob) -> None:
    sets = ", ".join(f"{name} = %s" for name in JOB_ROW.names[1:])
    values = JOB_ROW.values(op.job)
    cur = cx.run(
        f"UPDATE jobs SET {sets} WHERE agent_id = %s AND id = %s RETURNING 1",
        (*values[1:], cx.agent_id, values[0]),
    )
    if len(cur.fetchall()) != 1:
        raise RowMissing(f"no job {op.job.id}")


@handles(CompleteFire, reads_midway=lambda op: True)
def complete_fire(cx: Cx, op: CompleteFire) -> None:
    fire = op.fire
    inserted = cx.run(
        f"INSERT INTO job_fires (agent_id, {FIRE_ROW.columns}) VALUES (%s, {FIRE_ROW.marks('%s')})"
        " ON CONFLICT DO NOTHING RETURNING 1",
        (cx.agent_id, *FIRE_ROW.values(fire)),
    ).fetchall()
    if fire.trigger == "manual":
        moved = cx.run(
            "UPDATE jobs SET failures = %s, status = %s, paused_reason = %s, updated_at = %s"
            " WHERE agent_id = %s AND id = %s RETURNING 1",
            (op.failures, op.status, op.paused_reason, op.now, cx.agent_id, fire.job_id),
        ).fetchall()
    else:
        moved = cx.run(
            "UPDATE jobs SET next_fire_at = %s, failures = %s, status = %s, paused_reason = %s, updated_at = %s"
            " WHERE agent_id = %s AND id = %s AND next_fire_at = %s RETURNING 1",
            (
                op.next_fire_at,
                op.failures,
                op.status,
                op.paused_reason,
                op.now,
                cx.agent_id,
                fire.job_id,
                fire.fire_at,
            ),
        ).fetchall()
    if len(inserted) != 1 or len(moved) != 1:
        raise RowMissing(
            f"job {fire.job_id}'s fire at {fire.fire_at} was recorded already or the job changed"
        )


@handles(InsertDelivery)
def insert_delivery(cx: Cx, op: InsertDelivery) -> None:
    cx.run(
        f"INSERT INTO job_deliveries (agent_id, {DELIVERY_ROW.columns}) VALUES (%s, {DELIVERY_ROW.marks('%s')})",
        (cx.agent_id, *DELIVERY_ROW.values(op.delivery)),
    )


@handles(DeliveryAttempt)
def delivery_attempt(cx: Cx, op: DeliveryAttempt) -> None:
    cx.run(
        "UPDATE job_deliveries SET status = %s, attempts = %s, next_attempt_at = %s, sent_at = %s,"
        " last_error = %s WHERE agent_id = %s AND id = %s AND status = 'pending'",
        (op.status, op.attempts, op.next_attempt_at, op.sent_at, op.error, cx.agent_id, op.id),
    )


@handles(DeletePersonJobs, reads_midway=lambda op: True)
def delete_person_jobs(cx: Cx, op: DeletePersonJobs) -> dict[str, int]:
    ids = [
        row[0]
        for row in cx.run(
            f"DELETE FROM jobs WHERE agent_id = %s AND {_THEIRS} RETURNING id",
            (cx.agent_id, op.user_id, op.user_id),
        ).fetchall()
    ]
    cx.run("DELETE FROM job_fires WHERE agent_id = %s AND job_id = ANY(%s)", (cx.agent_id, ids))
    gone = cx.run(
        f"DELETE FROM job_deliveries WHERE agent_id = %s AND ({_THEIRS} OR job_id = ANY(%s)) RETURNING 1",
        (cx.agent_id, op.user_id, op.user_id, ids),
    ).fetchall()
    return {"jobs": len(ids), "deliveries": len(gone)}
