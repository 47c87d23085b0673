"""Migration 0007's SQL: fencing tokens that a crash never hands out again, matched on their holder too.

Until 0006 a ticket's id came from the UNLOGGED table's own sequence, and PostgreSQL (15 and later)
makes a sequence owned by an unlogged table unlogged as well: crash recovery (kill -9, an immediate
shutdown, a failover) empties the tickets *and* restarts their numbering at 1. A daemon that held
ticket 4 across the crash then passed the fence of another daemon's new ticket 4, and its late
release deleted that daemon's lease. Two changes close it:

- ids come from `claim_ticket_ids`, an ordinary (logged) sequence: it survives crash recovery, so a
  number is not handed out twice. (The claim's commit is asynchronous, as before, so in the worst
  case — a crash within the WAL writer's delay, ~200 ms, of the sequence's last WAL record —
  a number can come back; the next point makes that harmless.)
- the fence, the release, the renewal and agentd_claim's own p_ticket/p_release match the ticket's
  `daemon` as well as its id. Daemon ids are unique per process (host, pid, random suffix), so a
  number seen again can never act on another daemon's ticket.

Rolling upgrades: the table keeps its shape and agentd_claim its two signatures (replaced in place,
now holder-matching), so a daemon of the version before keeps claiming; its 3-argument fence and
1-argument release stay as they were. New overloads take the daemon (and the fence a deadline,
agentd/store/postgres/deadlines.py): a write that reaches the server after its deadline is refused
instead of committing after the client was told it failed.
"""

from __future__ import annotations

from agentd.store.postgres.claim_sql import CLAIM_0002_PARTS, CLAIM_0006_PARTS, NOTIFY_CHANNEL, claim_function

_QUEUE_KEY = "v.agent_id::text || '/' || v.purpose || '/' || v.conversation_key"

FENCE_STATEMENTS: tuple[str, ...] = (
    "CREATE SEQUENCE claim_ticket_ids",
    # past every number the unlogged sequence gave out (the live tickets keep theirs)
    "SELECT setval('claim_ticket_ids', GREATEST((SELECT last_value FROM claim_tickets_id_seq),"
    " (SELECT COALESCE(max(id), 0) FROM claim_tickets)) + 1)",
    "ALTER TABLE claim_tickets ALTER COLUMN id SET DEFAULT nextval('claim_ticket_ids')",
    claim_function(*CLAIM_0002_PARTS, holder_match=True),
    claim_function(*CLAIM_0006_PARTS, holder_match=True),
    # p_deadline: the server's clock (epoch seconds) after which the write must not commit; NULL: none
    """CREATE FUNCTION agentd_check_fence(
        p_ticket bigint, p_agent bigint, p_key text, p_daemon text, p_deadline double precision
    ) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        IF p_deadline IS NOT NULL AND extract(epoch FROM clock_timestamp()) > p_deadline THEN
            RAISE EXCEPTION 'a write of conversation % reached the database after its deadline', p_key
                USING ERRCODE = 'AD002';
        END IF;
        PERFORM 1 FROM claim_tickets t
          WHERE t.id = p_ticket AND t.daemon = p_daemon AND t.agent_id = p_agent
            AND t.conversation_key = p_key AND t.granted
          FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'conversation % is no longer held by this daemon (its lease % lapsed)',
                p_key, p_ticket USING ERRCODE = 'AD001';
        END IF;
    END
    $$""",
    f"""CREATE FUNCTION agentd_release(p_ticket bigint, p_daemon text) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v claim_tickets%ROWTYPE;
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        SELECT * INTO v FROM claim_tickets t WHERE t.id = p_ticket AND t.daemon = p_daemon;
        IF NOT FOUND THEN
            RETURN;  -- dropped already (it expired and another daemon took over), or given back
        END IF;
        PERFORM pg_advisory_xact_lock(hashtextextended({_QUEUE_KEY}, 0));
        DELETE FROM claim_tickets t WHERE t.id = p_ticket AND t.daemon = p_daemon;
        IF EXISTS (SELECT 1 FROM claim_tickets t WHERE t.agent_id = v.agent_id
                   AND t.purpose = v.purpose AND t.conversation_key = v.conversation_key) THEN
            PERFORM pg_notify('{NOTIFY_CHANNEL}', md5({_QUEUE_KEY}));
        END IF;
    END
    $$""",
)

CHECK_FENCE = "SELECT agentd_check_fence(%s, %s, %s, %s, %s)"
RELEASE = "SELECT agentd_release(%s, %s)"
RENEW = (
    "UPDATE claim_tickets SET expires_at = clock_timestamp() + %s * interval '1 second'"
    " WHERE id = ANY(%s) AND daemon = %s RETURNING id"
)
