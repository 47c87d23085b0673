"""Migrations 0002's and 0006's SQL: conversation claims (a ticket queue with leases) and named leases.

A claim on (agent, conversation key, purpose) is a ticket, taken when the event arrives. Tickets of
one conversation are served oldest first: the lease goes to the oldest live ticket once nobody
holds it. A ticket lives until its expiry, which its daemon keeps pushing back (the heartbeat) while
it waits or holds; a ticket past its expiry belongs to a daemon that was killed or stalled longer than
a lease, and whoever looks next drops it. Every grant decision for one conversation runs under a
transaction-level advisory lock, so two daemons never both see the lease free.

The holder's write batches check its ticket first (agentd_check_fence) with FOR KEY SHARE: dropping
an expired holder's ticket (a DELETE) waits for a batch already checking, so a batch is either
committed before the takeover reads the conversation, or refused. Release deletes the ticket and, when
others wait, notifies channel `agentd_claims` with the md5 of "agent id/purpose/key" so they try at
once instead of at their next poll.

Since 0006 a grant also brings the messages the claiming daemon's cached copy of the thread misses,
when they are few (agentd_claim's p_known_* and p_tail_cap): a daemon that was not the last to serve
the conversation catches up without a read of its own.

Named leases (`leases`) are simpler: one row per name, a holder and an expiry, for things one daemon
should do at a time (a bot's gateway connection); tokens come from a sequence.
"""

from __future__ import annotations

import hashlib

NOTIFY_CHANNEL = "agentd_claims"

_SAME_QUEUE = "t.agent_id = p_agent AND t.purpose = p_purpose AND t.conversation_key = p_key"
_QUEUE_KEY = "{agent}::text || '/' || {purpose} || '/' || {key}"

# What every version of agentd_claim does before it answers: the queue's lock, p_release given back,
# lapsed tickets dropped, then the lease tried for p_ticket (or a new ticket): v_granted. `{mine}` is
# empty in the shipped migrations 0002 and 0006 (their text never changes); 0007 matches p_release and
# p_ticket on this daemon as well (claim_fence_sql.py), so a ticket number seen again never acts on
# another daemon's ticket.
_TAKE_TICKET_TEMPLATE = f"""    DECLARE
        v_now timestamptz := clock_timestamp();
        v_until timestamptz := clock_timestamp() + p_lease * interval '1 second';
        v_holder_until timestamptz;
        v_oldest timestamptz;
        v_first bigint;
        v_granted boolean;
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);  -- (nothing here needs a WAL flush)
        PERFORM pg_advisory_xact_lock(
            hashtextextended({_QUEUE_KEY.format(agent="p_agent", purpose="p_purpose", key="p_key")}, 0));
        IF p_release IS NOT NULL THEN
            DELETE FROM claim_tickets t WHERE t.id = p_release AND {_SAME_QUEUE}{{mine}};
            IF FOUND AND EXISTS (SELECT 1 FROM claim_tickets t WHERE {_SAME_QUEUE}) THEN
                PERFORM pg_notify('{NOTIFY_CHANNEL}', md5(
                    {_QUEUE_KEY.format(agent="p_agent", purpose="p_purpose", key="p_key")}));
            END IF;
        END IF;
        SELECT max(t.expires_at) FILTER (WHERE t.granted), min(t.id), min(t.expires_at)
          INTO v_holder_until, v_first, v_oldest
          FROM claim_tickets t WHERE {_SAME_QUEUE} AND t.id IS DISTINCT FROM p_ticket;
        IF v_oldest < v_now THEN  -- (only when some ticket lapsed: the common case has none)
            DELETE FROM claim_tickets t
             WHERE {_SAME_QUEUE} AND t.expires_at < v_now AND t.id IS DISTINCT FROM p_ticket;
            SELECT max(t.expires_at) FILTER (WHERE t.granted), min(t.id) INTO v_holder_until, v_first
              FROM claim_tickets t WHERE {_SAME_QUEUE} AND t.id IS DISTINCT FROM p_ticket;
        END IF;
        IF p_ticket IS NOT NULL THEN
            UPDATE claim_tickets t
               SET expires_at = v_until,
                   granted = (v_holder_until IS NULL AND (v_first IS NULL OR v_first > p_ticket))
             WHERE t.id = p_ticket{{mine}}
            RETURNING t.granted INTO v_granted;
            IF NOT FOUND THEN
                p_ticket := NULL;  -- dropped as expired while this daemon stalled: a new one, last
            END IF;
        END IF;
        IF p_ticket IS NULL THEN
            v_granted := v_first IS NULL;  -- (a new ticket is younger than every other)
            INSERT INTO claim_tickets (agent_id, conversation_key, purpose, daemon, granted, expires_at)
            VALUES (p_agent, p_key, p_purpose, p_daemon, v_granted, v_until)
            RETURNING id INTO p_ticket;
        END IF;
"""
_TAKE_TICKET = _TAKE_TICKET_TEMPLATE.format(mine="")
HOLDER_MATCH = " AND t.daemon = p_daemon"
# 0002's grant: the thread mark and the memories version
_GRANTED = """            SELECT p_ticket, true, 0::double precision, th.id, th.version,
                   COALESCE((SELECT max(m.seq) FROM messages m WHERE m.thread_id = th.id), 0) + 1,
                   th.layers_version, a.memories_version
              FROM agents a
              LEFT JOIN threads th
                ON th.agent_id = a.id AND th.conversation_key = p_key AND th.status = 'active'
             WHERE a.id = p_agent;"""


def claim_function(
    last_params: str, last_columns: str, last_refused: str, granted: str, *, holder_match: bool = False
) -> str:
    """agentd_claim's text. Its versions differ only in their last parameters, the last columns they
    return (NULL when the lease is not granted) and the query that answers a grant; `holder_match`
    (0007) replaces the version of the same signature with one that matches tickets on the daemon too."""
    create = "CREATE OR REPLACE FUNCTION" if holder_match else "CREATE FUNCTION"
    take = _TAKE_TICKET_TEMPLATE.format(mine=HOLDER_MATCH) if holder_match else _TAKE_TICKET
    return f"""{create} agentd_claim(
        p_agent bigint, p_key text, p_purpose text, p_daemon text, p_lease double precision, p_ticket bigint,
        {last_params}
    ) RETURNS TABLE (
        ticket_id bigint, is_granted boolean, retry_s double precision, mark_thread bigint,
        mark_version bigint, mark_next_seq integer, {last_columns}
    ) LANGUAGE plpgsql AS $$
{take}        IF NOT v_granted THEN
            RETURN QUERY SELECT p_ticket, false,
                COALESCE(extract(epoch FROM v_holder_until - v_now)::double precision, p_lease),
                NULL::bigint, NULL::bigint, NULL::integer, {last_refused};
            RETURN;
        END IF;
        RETURN QUERY
{granted}
    END
    $$"""


# The parts of 0002's agentd_claim (7 arguments): its last parameters, columns, refusal and grant.
CLAIM_0002_PARTS = (
    "p_release bigint",
    "mark_layers bigint, memories bigint",
    "NULL::bigint, NULL::bigint",
    _GRANTED,
)

CLAIM_STATEMENTS: tuple[str, ...] = (
    # UNLOGGED: tickets are coordination, not data. Taking and giving one back then costs no WAL
    # flush (a turn pays for one durable commit, its own), and a server crash or a failover empties
    # the table: every lease is void, and a holder's next write is refused by its fence, never lost
    # silently.
    """CREATE UNLOGGED TABLE claim_tickets (
        id bigserial PRIMARY KEY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text COLLATE "C" NOT NULL,
        purpose text COLLATE "C" NOT NULL,
        daemon text NOT NULL,
        granted boolean NOT NULL DEFAULT false,
        expires_at timestamptz NOT NULL
    )""",
    "CREATE INDEX claim_tickets_queue ON claim_tickets (agent_id, purpose, conversation_key, id)",
    # Take a ticket (p_ticket NULL) or try again with one; the grant returns the conversation's
    # thread mark and the agent's memories version, read under the lease in the same statement.
    # p_release: this daemon's last ticket of the conversation, if its release may not have run yet
    # (the next message of a burst): given back here first, the others woken as a release would.
    # (migration 0006 adds an overload that also brings a cached copy's missing tail: CLAIM_TAIL_STATEMENTS)
    claim_function(*CLAIM_0002_PARTS),
    """CREATE FUNCTION agentd_check_fence(p_ticket bigint, p_agent bigint, p_key text)
    RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM 1 FROM claim_tickets t
          WHERE t.id = p_ticket AND t.agent_id = p_agent AND t.conversation_key = p_key AND t.granted
          FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'conversation % is no longer held by this daemon (its lease % lapsed)',
                p_key, p_ticket USING ERRCODE = 'AD001';
        END IF;
    END
    $$""",
    f"""CREATE FUNCTION agentd_release(p_ticket bigint) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v claim_tickets%ROWTYPE;
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        SELECT * INTO v FROM claim_tickets t WHERE t.id = p_ticket;
        IF NOT FOUND THEN
            RETURN;  -- dropped already: it expired and another daemon took over
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended(
            {_QUEUE_KEY.format(agent="v.agent_id", purpose="v.purpose", key="v.conversation_key")}, 0));
        DELETE FROM claim_tickets t WHERE t.id = p_ticket;
        IF EXISTS (SELECT 1 FROM claim_tickets t WHERE t.agent_id = v.agent_id
                   AND t.purpose = v.purpose AND t.conversation_key = v.conversation_key) THEN
            PERFORM pg_notify('{NOTIFY_CHANNEL}', md5(
                {_QUEUE_KEY.format(agent="v.agent_id", purpose="v.purpose", key="v.conversation_key")}));
        END IF;
    END
    $$""",
    """CREATE TABLE leases (
        name text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL
    )""",
    "CREATE SEQUENCE lease_tokens",
)

# 0006's grant also brings what a daemon's cached copy of the thread misses, so catching up costs no
# read of its own: p_known_* say where that copy stands (NULL: no copy). When the active thread is
# still that one (same id and version) and at most p_tail_cap messages ahead of it, the grant returns
# those messages (as arrays, in seq order) and the header fields they moved; else the tail is NULL and
# the daemon reads what it misses as before.
_GRANTED_WITH_TAIL = """            SELECT p_ticket, true, 0::double precision, th.id, th.version, mark.next_seq,
                   th.layers_version, a.memories_version, tail.seqs, tail.bodies, tail.runs,
                   th.last_input_tokens, th.last_tokens_estimated
              FROM agents a
              LEFT JOIN threads th
                ON th.agent_id = a.id AND th.conversation_key = p_key AND th.status = 'active'
              LEFT JOIN LATERAL (
                  SELECT COALESCE(max(m.seq), 0) + 1 AS next_seq FROM messages m WHERE m.thread_id = th.id
              ) mark ON true
              LEFT JOIN LATERAL (
                  SELECT array_agg(m.seq ORDER BY m.seq) AS seqs, array_agg(m.body ORDER BY m.seq) AS bodies,
                         array_agg(m.run_id ORDER BY m.seq) AS runs
                    FROM messages m
                   WHERE th.id = p_known_thread AND th.version = p_known_version
                     AND mark.next_seq - p_known_next_seq BETWEEN 1 AND p_tail_cap
                     AND m.thread_id = th.id AND NOT m.compacted AND m.seq >= p_known_next_seq
              ) tail ON true
             WHERE a.id = p_agent;"""

# The parts of 0006's agentd_claim (11 arguments), as CLAIM_0002_PARTS.
CLAIM_0006_PARTS = (
    "p_release bigint, p_known_thread bigint, p_known_version bigint, p_known_next_seq integer,\n"
    "        p_tail_cap integer",
    "mark_layers bigint, memories bigint,\n"
    "        tail_seqs integer[], tail_bodies text[], tail_runs text[], tail_input_tokens integer,\n"
    "        tail_tokens_estimated boolean",
    "NULL::bigint, NULL::bigint, NULL::integer[], NULL::text[], NULL::text[], NULL::integer, NULL::boolean",
    _GRANTED_WITH_TAIL,
)

CLAIM_TAIL_STATEMENTS: tuple[str, ...] = (
    # A new overload, not a replacement: a daemon of the version before, still running during a rolling
    # upgrade, keeps claiming with the 7-argument one (same tickets, same rules; it reads a missing tail
    # itself), so upgrading one daemon at a time never fails another's claims.
    claim_function(*CLAIM_0006_PARTS),
)

CLAIM = "SELECT * FROM agentd_claim(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def queue_digest(agent_id: int, purpose: str, key: str) -> str:
    """What agentd_release notifies for a conversation's queue (the same md5, computed here)."""
    return hashlib.md5(f"{agent_id}/{purpose}/{key}".encode()).hexdigest()
