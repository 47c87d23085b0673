"""Migration 0012_jobs's SQL: scheduled jobs, their fires and their deliveries (an outbox), per agent."""

from __future__ import annotations

C = 'COLLATE "C"'

JOB_TABLES: tuple[str, ...] = (
    f"""CREATE TABLE jobs (
        agent_id bigint NOT NULL REFERENCES agents (id),
        id text {C} NOT NULL,
        name text {C},
        conversation_key text NOT NULL,
        deliver_to text,
        owner text,
        user_id text,
        kind text NOT NULL CHECK (kind IN ('reminder', 'task', 'heartbeat')),
        text text NOT NULL,
        schedule text NOT NULL,
        timezone text NOT NULL,
        status text NOT NULL CHECK (status IN ('active', 'paused', 'cancelled', 'done')),
        next_fire_at double precision,
        failures integer NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        paused_reason text,
        PRIMARY KEY (agent_id, id),
        UNIQUE (agent_id, name)
    )""",
    # the scheduler's one question, "when is the next fire?", is the first entry of this index
    "CREATE INDEX jobs_next_fire ON jobs (agent_id, next_fire_at)"
    " WHERE status = 'active' AND next_fire_at IS NOT NULL",
    "CREATE INDEX jobs_by_conversation ON jobs (agent_id, conversation_key)",
    "CREATE INDEX jobs_by_owner ON jobs (agent_id, owner)",
    f"""CREATE TABLE job_fires (
        agent_id bigint NOT NULL REFERENCES agents (id),
        job_id text {C} NOT NULL,
        fire_at double precision NOT NULL,
        trigger text NOT NULL,
        status text NOT NULL,
        run_id text,
        started_at double precision NOT NULL,
        finished_at double precision NOT NULL,
        error text,
        daemon text,
        PRIMARY KEY (agent_id, job_id, fire_at)
    )""",
    f"""CREATE TABLE job_deliveries (
        agent_id bigint NOT NULL REFERENCES agents (id),
        id text {C} NOT NULL,
        job_id text {C} NOT NULL,
        fire_at double precision NOT NULL,
        conversation_key text NOT NULL,
        owner text,
        user_id text,
        text text NOT NULL,
        status text NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at double precision NOT NULL,
        created_at double precision NOT NULL,
        sent_at double precision,
        last_error text,
        PRIMARY KEY (agent_id, id)
    )""",
    "CREATE INDEX job_deliveries_due ON job_deliveries (agent_id, next_attempt_at) WHERE status = 'pending'",
    "CREATE INDEX job_deliveries_by_job ON job_deliveries (agent_id, job_id, created_at)",
)
