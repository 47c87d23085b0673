"""Migration 0011_jobs's SQL: scheduled jobs, their fires and their deliveries (an outbox)."""

from __future__ import annotations

JOB_TABLES: tuple[str, ...] = (
    """CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        name TEXT UNIQUE,
        conversation_key TEXT NOT NULL,
        deliver_to TEXT,
        owner TEXT,
        user_id TEXT,
        kind TEXT NOT NULL CHECK (kind IN ('reminder', 'task', 'heartbeat')),
        text TEXT NOT NULL,
        schedule TEXT NOT NULL,
        timezone TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'paused', 'cancelled', 'done')),
        next_fire_at REAL,
        failures INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        paused_reason TEXT
    ) WITHOUT ROWID""",
    # the scheduler's one question, "when is the next fire?", is the first entry of this index
    "CREATE INDEX jobs_next_fire ON jobs(next_fire_at) WHERE status = 'active' AND next_fire_at IS NOT NULL",
    "CREATE INDEX jobs_by_conversation ON jobs(conversation_key)",
    "CREATE INDEX jobs_by_owner ON jobs(owner)",
    """CREATE TABLE job_fires (
        job_id TEXT NOT NULL,
        fire_at REAL NOT NULL,
        trigger TEXT NOT NULL,
        status TEXT NOT NULL,
        run_id TEXT,
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL,
        error TEXT,
        daemon TEXT,
        PRIMARY KEY (job_id, fire_at)
    ) WITHOUT ROWID""",
    """CREATE TABLE job_deliveries (
        id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        fire_at REAL NOT NULL,
        conversation_key TEXT NOT NULL,
        owner TEXT,
        user_id TEXT,
        text TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at REAL NOT NULL,
        created_at REAL NOT NULL,
        sent_at REAL,
        last_error TEXT
    ) WITHOUT ROWID""",
    "CREATE INDEX job_deliveries_due ON job_deliveries(next_attempt_at) WHERE status = 'pending'",
    "CREATE INDEX job_deliveries_by_job ON job_deliveries(job_id, created_at)",
)
