"""Append-only, named schema migrations of the PostgreSQL store. A shipped migration is never edited.

One database holds every agent: each row carries its agent's id (`agents.id`), and every statement
of the store is scoped by it. Each migration is applied in one transaction together with its row in
`schema_migrations`, under an advisory lock, so daemons that start at once migrate once, one after
the other. Text that is sorted or compared is COLLATE "C": byte order, as SQLite sorts, whatever the
database's own collation. JSON is stored as text, exactly as written (jsonb would reorder keys).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import psycopg

from agentd.errors import NewerSchema, StoreError
from agentd.store.postgres.audit import seal_unchained
from agentd.store.postgres.budget_sql import BUDGETS
from agentd.store.postgres.claim_fence_sql import FENCE_STATEMENTS
from agentd.store.postgres.claim_sql import CLAIM_STATEMENTS, CLAIM_TAIL_STATEMENTS
from agentd.store.postgres.connection import SCHEMA, Pooler
from agentd.store.postgres.job_schema import JOB_TABLES
from agentd.store.postgres.stop_sql import STOP_ASK_STATEMENTS

Step = str | Callable[[psycopg.Connection[Any]], None]  # a statement, or what SQL alone cannot do
Migrations = list[tuple[str, tuple[Step, ...]]]
MIGRATION_LOCK = 0x61_67_65_6E_74_64  # pg_advisory_lock key: "agentd"
C = 'COLLATE "C"'

INITIAL: tuple[str, ...] = (
    """CREATE TABLE agents (
        id bigserial PRIMARY KEY,
        name text NOT NULL UNIQUE,
        created_at double precision NOT NULL,
        memories_version bigint NOT NULL DEFAULT 0
    )""",
    f"""CREATE TABLE identity (
        agent_id bigint NOT NULL REFERENCES agents (id),
        key text {C} NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (agent_id, key)
    )""",
    # version moves on every change that is not an append (compaction, archive, reset) and
    # layers_version on every memory_state write: what a claim's ThreadMark reports.
    f"""CREATE TABLE threads (
        id bigserial PRIMARY KEY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text {C} NOT NULL,
        status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
        created_at double precision NOT NULL,
        ended_at double precision,
        last_input_tokens integer,
        last_tokens_estimated boolean NOT NULL DEFAULT false,
        version bigint NOT NULL DEFAULT 0,
        layers_version bigint NOT NULL DEFAULT 0
    )""",
    "CREATE UNIQUE INDEX threads_one_active ON threads (agent_id, conversation_key) WHERE status = 'active'",
    "CREATE INDEX threads_by_key ON threads (agent_id, conversation_key, id)",
    """CREATE TABLE messages (
        thread_id bigint NOT NULL REFERENCES threads (id),
        seq integer NOT NULL,
        agent_id bigint NOT NULL,
        role text NOT NULL,
        user_id text,
        body text NOT NULL,
        run_id text,
        created_at double precision NOT NULL,
        compacted boolean NOT NULL DEFAULT false,
        PRIMARY KEY (thread_id, seq)
    )""",
    """CREATE TABLE summaries (
        id bigserial PRIMARY KEY,
        thread_id bigint NOT NULL REFERENCES threads (id),
        agent_id bigint NOT NULL,
        upto_seq integer NOT NULL,
        text text NOT NULL,
        run_id text,
        created_at double precision NOT NULL
    )""",
    "CREATE INDEX summaries_by_thread ON summaries (thread_id, id)",
    # n: the order rows were written in (SQLite's rowid), the tie-break among equal start times
    f"""CREATE TABLE runs (
        id text NOT NULL,
        n bigint GENERATED ALWAYS AS IDENTITY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text {C},
        thread_id bigint,
        trigger text NOT NULL,
        model text,
        status text NOT NULL,
        input_tokens integer NOT NULL DEFAULT 0,
        output_tokens integer NOT NULL DEFAULT 0,
        tokens_estimated boolean NOT NULL DEFAULT false,
        last_input_tokens integer,
        model_calls integer NOT NULL DEFAULT 0,
        started_at double precision NOT NULL,
        duration_ms double precision,
        error text,
        parent_run_id text,
        daemon text,
        PRIMARY KEY (agent_id, id)
    )""",
    "CREATE INDEX runs_by_conversation ON runs (agent_id, conversation_key, started_at, n)",
    "CREATE INDEX runs_by_time ON runs (agent_id, started_at, n)",
    f"""CREATE TABLE audit (
        id bigserial PRIMARY KEY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        ts double precision NOT NULL,
        agent text NOT NULL,
        kind text NOT NULL,
        action text NOT NULL,
        conversation_key text {C},
        run_id text,
        data text NOT NULL DEFAULT '{{}}',
        daemon text
    )""",
    "CREATE INDEX audit_by_time ON audit (agent_id, ts, id)",
    "CREATE INDEX audit_by_kind ON audit (agent_id, kind, ts, id)",
    f"""CREATE TABLE memories (
        agent_id bigint NOT NULL REFERENCES agents (id),
        scope text {C} NOT NULL DEFAULT '',
        key text {C} NOT NULL,
        value text NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        run_id text,
        PRIMARY KEY (agent_id, scope, key)
    )""",
    # de-duplication of platform deliveries is this primary key, whichever daemon got the delivery
    f"""CREATE TABLE inbound_events (
        agent_id bigint NOT NULL REFERENCES agents (id),
        channel text {C} NOT NULL,
        event_id text {C} NOT NULL,
        conversation_key text,
        run_id text,
        received_at double precision NOT NULL,
        PRIMARY KEY (agent_id, channel, event_id)
    )""",
    "CREATE INDEX inbound_events_by_time ON inbound_events (agent_id, received_at)",
    f"""CREATE TABLE memory_state (
        thread_id bigint NOT NULL REFERENCES threads (id),
        layer text {C} NOT NULL,
        agent_id bigint NOT NULL,
        data text NOT NULL DEFAULT '{{}}',
        upto_seq integer NOT NULL DEFAULT 0,
        updated_at double precision NOT NULL,
        PRIMARY KEY (thread_id, layer)
    )""",
    f"""CREATE TABLE facts (
        agent_id bigint NOT NULL REFERENCES agents (id),
        partition text {C} NOT NULL,
        key text {C} NOT NULL,
        value text NOT NULL,
        confidence double precision NOT NULL DEFAULT 1.0,
        source text,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        run_id text,
        PRIMARY KEY (agent_id, partition, key)
    )""",
    "CREATE INDEX facts_by_update ON facts (agent_id, partition, updated_at)",
    # Per agent and partition, a counter every episode write moves (agentd/store/postgres/episodes.py
    # says why); `horizon`: deletions up to that change are no longer listed one by one.
    f"""CREATE TABLE episode_partitions (
        agent_id bigint NOT NULL REFERENCES agents (id),
        partition text {C} NOT NULL,
        change bigint NOT NULL,
        horizon bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (agent_id, partition)
    )""",
    # `change`: the partition's counter when the row was inserted or got its vector.
    f"""CREATE TABLE episodes (
        id bigserial PRIMARY KEY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        partition text {C} NOT NULL,
        conversation_key text {C},
        text text NOT NULL,
        importance double precision NOT NULL DEFAULT 1.0,
        created_at double precision NOT NULL,
        run_id text,
        embedder text {C},
        vector bytea,
        change bigint NOT NULL,
        words tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED
    )""",
    "CREATE INDEX episodes_by_partition ON episodes (agent_id, partition, embedder, id)",
    "CREATE INDEX episodes_by_change ON episodes (agent_id, partition, embedder, change)",
    "CREATE INDEX episodes_by_age ON episodes (agent_id, partition, created_at)",
    "CREATE INDEX episodes_by_conversation ON episodes (agent_id, conversation_key)",
    "CREATE INDEX episodes_unembedded ON episodes (agent_id, partition, id) WHERE vector IS NULL",
    "CREATE INDEX episodes_words ON episodes USING gin (words)",
    f"""CREATE TABLE episode_deletions (
        agent_id bigint NOT NULL,
        partition text {C} NOT NULL,
        change bigint NOT NULL,
        episode_id bigint NOT NULL,
        PRIMARY KEY (agent_id, partition, change, episode_id)
    )""",
)

APPROVALS: tuple[str, ...] = (
    # A tool call waiting for a person, and the paused run's state (NULL once resumed); JSON as text.
    f"""CREATE TABLE approvals (
        agent_id bigint NOT NULL REFERENCES agents (id),
        id text {C} NOT NULL,
        conversation_key text {C} NOT NULL,
        run_id text NOT NULL,
        tool text NOT NULL,
        server text,
        args text NOT NULL,
        shown_args text NOT NULL,
        requested_by text NOT NULL,
        approvers text NOT NULL,
        created_at double precision NOT NULL,
        expires_at double precision NOT NULL,
        status text NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'approved', 'refused', 'expired')),
        decided_by text,
        decided_at double precision,
        state text,
        PRIMARY KEY (agent_id, id)
    )""",
    "CREATE INDEX approvals_open ON approvals (agent_id, created_at, id) WHERE state IS NOT NULL",
)

AUDIT_CHAIN: tuple[Step, ...] = (
    # The hash chain (agentd/store/audit_chain.py): each event's place in its agent's chain, the nonces
    # of its fields, the commitments of fields erased since, the hash before it and its own.
    "ALTER TABLE audit ADD COLUMN seq bigint, ADD COLUMN salts text, ADD COLUMN erased text,"
    " ADD COLUMN prev_hash bytea, ADD COLUMN hash bytea",
    # Per agent, the chain's head: appending moves it, so appends to one chain are serialized by its
    # row lock whichever daemon makes them (agentd/store/postgres/audit.py), and a trail cut short
    # (its last events deleted) no longer matches it.
    """CREATE TABLE audit_chains (
        agent_id bigint PRIMARY KEY REFERENCES agents (id),
        seq bigint NOT NULL,
        head bytea NOT NULL,
        prev bytea NOT NULL
    )""",
    seal_unchained,  # the events written before this version, chained in the order they were written
    "CREATE UNIQUE INDEX audit_by_seq ON audit (agent_id, seq)",
    # a person's messages, found at once when their data is exported or erased
    "CREATE INDEX messages_by_user ON messages (agent_id, user_id) WHERE user_id IS NOT NULL",
)

COPIED_ROWS: tuple[Step, ...] = (
    # What `agentd store copy` brought here from each agent's SQLite file (agentd/store/copy_plan.py):
    # a row's key there (its id in the file, or its natural key), for a row the file numbered itself
    # the id it got here, and a fingerprint of the row as copied. Copying again compares instead of
    # copying twice, tells which side changed a row since, and leaves a row deleted here deleted.
    f"""CREATE TABLE copied_rows (
        agent_id bigint NOT NULL REFERENCES agents (id),
        source_table text {C} NOT NULL,
        source_key text {C} NOT NULL,
        target_id bigint,
        row_digest text NOT NULL,
        PRIMARY KEY (agent_id, source_table, source_key)
    )""",
)

PERSON_LINKS: tuple[Step, ...] = (
    # Accounts ("telegram:42") linked into one person (agentd/engine/linking.py): daemon-wide, so no
    # agent column; every daemon of the database sees the same links.
    f"""CREATE TABLE person_links (
        account text {C} PRIMARY KEY,
        person text {C} NOT NULL,
        source text NOT NULL,
        linked_at double precision NOT NULL
    )""",
    "CREATE INDEX person_links_by_person ON person_links (person, account)",
    # one-time codes of /link: a digest of the code, never the code
    f"""CREATE TABLE link_codes (
        digest text {C} PRIMARY KEY,
        account text {C} NOT NULL,
        expires_at double precision NOT NULL
    )""",
    # moved by every link and unlink: a daemon's cache of links is current while it reads the same
    "CREATE TABLE people_version (id integer PRIMARY KEY CHECK (id = 1), version bigint NOT NULL)",
    "INSERT INTO people_version (id, version) VALUES (1, 0)",
)

MEDIA: tuple[Step, ...] = (
    # The files people send (agentd/store/postgres/media.py), as the SQLite file keeps them.
    f"""CREATE TABLE media (
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text {C} NOT NULL,
        sender text {C} NOT NULL,
        sha256 text {C} NOT NULL,
        kind text NOT NULL,
        mime_type text NOT NULL,
        filename text,
        size bigint NOT NULL,
        data bytea NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (agent_id, conversation_key, sender, sha256)
    )""",
    "CREATE INDEX media_by_sender ON media (agent_id, sender)",
    "CREATE INDEX media_by_age ON media (agent_id, created_at)",
)

CONVERSATION_MODELS: tuple[Step, ...] = (
    # the model /model switched a conversation to (agentd.engine.model_command)
    f"""CREATE TABLE conversation_models (
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text {C} NOT NULL,
        model text NOT NULL,
        set_at double precision NOT NULL,
        PRIMARY KEY (agent_id, conversation_key)
    )""",
)

MIGRATIONS: Migrations = [
    ("0001_initial", INITIAL),
    ("0002_claims", CLAIM_STATEMENTS),
    ("0003_approvals", APPROVALS),
    ("0004_audit_chain", AUDIT_CHAIN),
    ("0005_copied_rows", COPIED_ROWS),
    ("0006_claim_tail", CLAIM_TAIL_STATEMENTS),
    ("0007_claim_fences", FENCE_STATEMENTS),
    ("0008_person_links", PERSON_LINKS),
    ("0009_media", MEDIA),
    ("0010_budgets", BUDGETS),
    ("0011_conversation_models", CONVERSATION_MODELS),
    ("0012_jobs", JOB_TABLES),
    ("0013_stop_asks", STOP_ASK_STATEMENTS),
    # GET /agents/{agent}/media/{sha256} finds a file by its hash alone (the key leads with the conversation)
    ("0014_media_by_hash", ("CREATE INDEX media_by_hash ON media (agent_id, sha256)",)),
]


def applied(conn: psycopg.Connection[Any]) -> list[str]:
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations (name text PRIMARY KEY,"
        " applied_at double precision NOT NULL, n integer GENERATED ALWAYS AS IDENTITY)"
    )
    return [row[0] for row in conn.execute(f"SELECT name FROM {SCHEMA}.schema_migrations ORDER BY n")]


def migrate(
    conn: psycopg.Connection[Any], migrations: Migrations = MIGRATIONS, *, pooler: Pooler = "none"
) -> list[str]:
    """Apply every migration not yet applied, in order, under the migration lock; returns the names
    applied now. `conn` is in autocommit mode and not in a pipeline.

    Behind a transaction-mode pooler a session lock would be taken on one server connection and
    released on another (never, in fact): there everything runs in one transaction under the
    transaction-level lock, and the server must supply the search path (checked first)."""
    if pooler == "transaction":
        _check_search_path(conn)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            return _apply(conn, migrations, one_transaction=True)
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        return _apply(conn, migrations, one_transaction=False)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _check_search_path(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT current_setting('search_path'), current_user, current_database()").fetchone()
    assert row is not None
    path, user, database = row
    if [part.strip().strip('"') for part in path.split(",")][:1] != [SCHEMA]:
        raise StoreError(
            f"store.pooler is transaction, and there agentd cannot set its search path per session (a "
            f"pooled server connection keeps no session state): the server's search_path is {path!r}. "
            f'Set it for agentd\'s role: ALTER ROLE "{user}" IN DATABASE "{database}" SET search_path = {SCHEMA} '
            "(new server connections get it; restart the pooler's), then start agentd again"
        )


def _apply(conn: psycopg.Connection[Any], migrations: Migrations, *, one_transaction: bool) -> list[str]:
    done = set(applied(conn))
    unknown = done - {name for name, _ in migrations}
    if unknown:
        raise NewerSchema(
            f"this database was written by a newer agentd (migrations {', '.join(sorted(unknown))} "
            "are unknown to this one): upgrade agentd to use it; nothing was changed"
        )
    now_applied = []
    for name, statements in migrations:
        if name in done:
            continue
        with contextlib.nullcontext() if one_transaction else conn.transaction():
            for step in statements:
                if isinstance(step, str):
                    conn.execute(step)  # type: ignore[arg-type]  # (literal DDL)
                else:
                    step(conn)
            conn.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)", (name, time.time())
            )
        now_applied.append(name)
    return now_applied
