"""Append-only, named schema migrations. A shipped migration is never edited: add a new one.

Each migration is applied in one transaction together with its row in
`schema_migrations`, so a crash mid-migration leaves the file as it was. A step
is a statement, or a function of the connection for what SQL alone cannot do
(sealing the audit rows written before the chain existed).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from agentd.errors import NewerSchema
from agentd.store.sqlite.audit import seal_unchained
from agentd.store.sqlite.job_schema import JOB_TABLES

Step = str | Callable[[sqlite3.Connection], None]
Migrations = list[tuple[str, tuple[Step, ...]]]

MIGRATIONS: Migrations = [
    (
        "0001_initial",
        (
            """CREATE TABLE identity (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
            """CREATE TABLE threads (
                id INTEGER PRIMARY KEY,
                conversation_key TEXT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
                created_at REAL NOT NULL,
                ended_at REAL,
                last_input_tokens INTEGER,
                last_tokens_estimated INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE UNIQUE INDEX threads_one_active ON threads(conversation_key) WHERE status = 'active'",
            "CREATE INDEX threads_by_key ON threads(conversation_key, id)",
            """CREATE TABLE messages (
                id INTEGER PRIMARY KEY,
                thread_id INTEGER NOT NULL REFERENCES threads(id),
                seq INTEGER NOT NULL,
                role TEXT NOT NULL,
                user_id TEXT,
                body TEXT NOT NULL,
                run_id TEXT,
                created_at REAL NOT NULL,
                compacted INTEGER NOT NULL DEFAULT 0,
                UNIQUE (thread_id, seq)
            )""",
            """CREATE TABLE summaries (
                id INTEGER PRIMARY KEY,
                thread_id INTEGER NOT NULL REFERENCES threads(id),
                upto_seq INTEGER NOT NULL,
                text TEXT NOT NULL,
                run_id TEXT,
                created_at REAL NOT NULL
            )""",
            "CREATE INDEX summaries_by_thread ON summaries(thread_id, id)",
            """CREATE TABLE runs (
                id TEXT PRIMARY KEY,
                conversation_key TEXT,
                thread_id INTEGER,
                trigger TEXT NOT NULL,
                model TEXT,
                status TEXT NOT NULL,
                input_tokens INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                tokens_estimated INTEGER NOT NULL DEFAULT 0,
                last_input_tokens INTEGER,
                model_calls INTEGER NOT NULL DEFAULT 0,
                started_at REAL NOT NULL,
                duration_ms REAL,
                error TEXT,
                parent_run_id TEXT
            )""",
            "CREATE INDEX runs_by_conversation ON runs(conversation_key, started_at)",
            "CREATE INDEX runs_by_time ON runs(started_at)",
            """CREATE TABLE audit (
                id INTEGER PRIMARY KEY,
                ts REAL NOT NULL,
                agent TEXT NOT NULL,
                kind TEXT NOT NULL,
                action TEXT NOT NULL,
                conversation_key TEXT,
                run_id TEXT,
                data TEXT NOT NULL DEFAULT '{}'
            )""",
            "CREATE INDEX audit_by_time ON audit(ts)",
            "CREATE INDEX audit_by_kind ON audit(kind, ts)",
            """CREATE TABLE memories (
                scope TEXT NOT NULL DEFAULT '',
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                run_id TEXT,
                PRIMARY KEY (scope, key)
            ) WITHOUT ROWID""",
            """CREATE TABLE inbound_events (
                channel TEXT NOT NULL,
                event_id TEXT NOT NULL,
                conversation_key TEXT,
                run_id TEXT,
                received_at REAL NOT NULL,
                PRIMARY KEY (channel, event_id)
            ) WITHOUT ROWID""",
        ),
    ),
    (
        "0002_memory_strategies",
        (
            # Per thread and strategy layer: what the layer carries (a rolling summary, Σ, an
            # extraction cursor) and the last message seq it has taken in. Keyed by thread, so
            # /new starts every layer afresh and the archived thread keeps its own.
            """CREATE TABLE memory_state (
                thread_id INTEGER NOT NULL REFERENCES threads(id),
                layer TEXT NOT NULL,
                data TEXT NOT NULL DEFAULT '{}',
                upto_seq INTEGER NOT NULL DEFAULT 0,
                updated_at REAL NOT NULL,
                PRIMARY KEY (thread_id, layer)
            ) WITHOUT ROWID""",
            # Episodes, partitioned by the person who spoke. `embedder` and `vector` stay NULL
            # until the episode is embedded (an embedder that is down never loses an episode).
            """CREATE TABLE episodes (
                id INTEGER PRIMARY KEY,
                partition TEXT NOT NULL,
                conversation_key TEXT,
                text TEXT NOT NULL,
                importance REAL NOT NULL DEFAULT 1.0,
                created_at REAL NOT NULL,
                run_id TEXT,
                embedder TEXT,
                vector BLOB
            )""",
            "CREATE INDEX episodes_by_partition ON episodes(partition, embedder, id)",
            "CREATE INDEX episodes_unembedded ON episodes(id) WHERE vector IS NULL",
            """CREATE VIRTUAL TABLE episodes_fts USING fts5(
                text, content='episodes', content_rowid='id', tokenize='porter unicode61'
            )""",
            """CREATE TRIGGER episodes_fts_insert AFTER INSERT ON episodes BEGIN
                INSERT INTO episodes_fts(rowid, text) VALUES (new.id, new.text);
            END""",
            """CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
                INSERT INTO episodes_fts(episodes_fts, rowid, text) VALUES ('delete', old.id, old.text);
            END""",
            """CREATE TRIGGER episodes_fts_update AFTER UPDATE OF text ON episodes BEGIN
                INSERT INTO episodes_fts(episodes_fts, rowid, text) VALUES ('delete', old.id, old.text);
                INSERT INTO episodes_fts(rowid, text) VALUES (new.id, new.text);
            END""",
            # Semantic facts, partitioned by speaker, upserted by key (newer wins).
            """CREATE TABLE facts (
                partition TEXT NOT NULL,
                key TEXT NOT NULL,
                value TEXT NOT NULL,
                confidence REAL NOT NULL DEFAULT 1.0,
                source TEXT,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                run_id TEXT,
                PRIMARY KEY (partition, key)
            ) WITHOUT ROWID""",
        ),
    ),
    (
        "0003_episode_retention",
        (
            # max_age_days deletes a partition's episodes older than a time: found by this index,
            # not by reading the whole partition on every write.
            "CREATE INDEX episodes_by_age ON episodes(partition, created_at)",
        ),
    ),
    (
        "0004_daemon_columns",
        (
            # which daemon ran a run or wrote an audit event (several daemons may share a store)
            "ALTER TABLE runs ADD COLUMN daemon TEXT",
            "ALTER TABLE audit ADD COLUMN daemon TEXT",
        ),
    ),
    (
        "0005_approvals",
        (
            # A tool call waiting for a person, and the paused run's state (NULL once resumed).
            """CREATE TABLE approvals (
                id TEXT PRIMARY KEY,
                conversation_key TEXT NOT NULL,
                run_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                server TEXT,
                args TEXT NOT NULL,
                shown_args TEXT NOT NULL,
                requested_by TEXT NOT NULL,
                approvers TEXT NOT NULL,
                created_at REAL NOT NULL,
                expires_at REAL NOT NULL,
                status TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'refused', 'expired')),
                decided_by TEXT,
                decided_at REAL,
                state TEXT
            )""",
            "CREATE INDEX approvals_open ON approvals(created_at) WHERE state IS NOT NULL",
        ),
    ),
    (
        "0006_audit_chain",
        (
            # The hash chain (agentd/store/audit_chain.py): each event's place, the nonces of its
            # fields, the commitments of fields erased since, the hash before it and its own.
            "ALTER TABLE audit ADD COLUMN seq INTEGER",
            "ALTER TABLE audit ADD COLUMN salts TEXT",
            "ALTER TABLE audit ADD COLUMN erased TEXT",
            "ALTER TABLE audit ADD COLUMN prev_hash BLOB",
            "ALTER TABLE audit ADD COLUMN hash BLOB",
            # The chain's head: the last seq and hash, so an append needs no scan and a trail cut
            # short (its last events deleted) no longer matches it.
            """CREATE TABLE audit_chain (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                seq INTEGER NOT NULL,
                head BLOB NOT NULL
            )""",
            # events written before this version are sealed now, in the order they were written
            seal_unchained,
            "CREATE UNIQUE INDEX audit_by_seq ON audit(seq)",
            # a person's messages, found at once when their data is exported or erased
            "CREATE INDEX messages_by_user ON messages(user_id) WHERE user_id IS NOT NULL",
        ),
    ),
    (
        "0007_person_links",
        (
            # Accounts ("telegram:42") linked into one person (agentd/engine/linking.py): kept in the
            # daemon's own file (_daemon.sqlite); an agent's file has the tables, empty.
            """CREATE TABLE person_links (
                account TEXT PRIMARY KEY,
                person TEXT NOT NULL,
                source TEXT NOT NULL,
                linked_at REAL NOT NULL
            )""",
            "CREATE INDEX person_links_by_person ON person_links(person, account)",
            # one-time codes of /link: a digest of the code, never the code
            """CREATE TABLE link_codes (
                digest TEXT PRIMARY KEY,
                account TEXT NOT NULL,
                expires_at REAL NOT NULL
            )""",
            "CREATE TABLE people_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
            "INSERT INTO people_version (id, version) VALUES (1, 0)",
        ),
    ),
    (
        "0008_media",
        (
            # The files people send (agentd/store/sqlite/media.py): the bytes once per conversation,
            # sender and content hash; the transcript's messages refer to them by hash.
            """CREATE TABLE media (
                conversation_key TEXT NOT NULL,
                sender TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                kind TEXT NOT NULL,
                mime_type TEXT NOT NULL,
                filename TEXT,
                size INTEGER NOT NULL,
                data BLOB NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (conversation_key, sender, sha256)
            )""",
            "CREATE INDEX media_by_sender ON media(sender)",
            "CREATE INDEX media_by_age ON media(created_at)",
        ),
    ),
    (
        "0009_budgets",
        (
            # Budgets' counters, usage per day and rate limits' buckets: written in the daemon's own
            # file (_daemon.sqlite), which every agent of the folder charges (agentd/engine/metering.py).
            """CREATE TABLE budget_spend (
                budget TEXT NOT NULL,
                subject TEXT NOT NULL,
                period TEXT NOT NULL,
                used INTEGER NOT NULL DEFAULT 0,
                told INTEGER NOT NULL DEFAULT 0,  -- the refusal was said (once per counter)
                PRIMARY KEY (budget, subject, period)
            )""",
            """CREATE TABLE usage_days (
                day TEXT NOT NULL,
                agent TEXT NOT NULL,
                who TEXT NOT NULL,
                channel TEXT NOT NULL,
                model TEXT NOT NULL,
                trigger TEXT NOT NULL,
                calls INTEGER NOT NULL DEFAULT 0,
                estimated_calls INTEGER NOT NULL DEFAULT 0,
                input_tokens INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                cost_micros INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (day, agent, who, channel, model, trigger)
            )""",
            "CREATE INDEX usage_by_who ON usage_days(who, day)",
            """CREATE TABLE rate_buckets (
                scope TEXT NOT NULL,
                subject TEXT NOT NULL,
                tokens REAL NOT NULL,
                at REAL NOT NULL,
                refused INTEGER NOT NULL DEFAULT 0,  -- events refused in a row (the streak)
                ended INTEGER NOT NULL DEFAULT 0,  -- the streak the last token taken ended
                PRIMARY KEY (scope, subject)
            )""",
        ),
    ),
    (
        "0010_conversation_models",
        (
            # the model /model switched a conversation to (agentd.engine.model_command)
            """CREATE TABLE conversation_models (
                conversation_key TEXT PRIMARY KEY,
                model TEXT NOT NULL,
                set_at REAL NOT NULL
            )""",
        ),
    ),
    ("0011_jobs", JOB_TABLES),
    # GET /agents/{agent}/media/{sha256} finds a file by its hash alone (the key leads with the conversation)
    ("0012_media_by_hash", ("CREATE INDEX media_by_hash ON media(sha256, created_at)",)),
]


def applied(conn: sqlite3.Connection) -> list[str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]


def migrate(conn: sqlite3.Connection, migrations: Migrations = MIGRATIONS) -> list[str]:
    """Apply every migration not yet applied, in order; returns the names applied now.

    The connection must be in autocommit mode (isolation_level=None) so that
    BEGIN/COMMIT here are the only transaction boundaries.
    """
    done = set(applied(conn))
    known = [name for name, _ in migrations]
    unknown = done - set(known)
    if unknown:
        raise NewerSchema(
            f"this data was written by a newer agentd (migrations {', '.join(sorted(unknown))} are unknown "
            "to this one): upgrade agentd to serve this agent; nothing was changed"
        )
    now_applied = []
    for name, statements in migrations:
        if name in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            for step in statements:
                if isinstance(step, str):
                    conn.execute(step)
                else:
                    step(conn)
            conn.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", (name, time.time())
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        now_applied.append(name)
    return now_applied
