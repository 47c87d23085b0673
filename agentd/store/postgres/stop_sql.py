"""Migration 0013's SQL and the statements of stop asks (agentd.store.stop_asks) on PostgreSQL.

An ask is a row addressed to the daemon holding the conversation's turn claim (read from
`claim_tickets` in the same statement that writes it), with a notification on channel `agentd_stops`
(`ask:<daemon>`) so that daemon takes it at once; its answer notifies `done:<ask id>`. The asking
daemon deletes the row when it reads the answer, or when it gives up waiting (withdrawn); rows an
asker left behind (it was killed meanwhile) go with the next ask after ten minutes.
"""

from __future__ import annotations

STOP_CHANNEL = "agentd_stops"

STOP_ASK_STATEMENTS: tuple[str, ...] = (
    # UNLOGGED, as claim_tickets: coordination, not data (a server crash empties it, and the askers
    # waiting then give up as for a daemon that never answered)
    """CREATE UNLOGGED TABLE stop_asks (
        id bigserial PRIMARY KEY,
        agent_id bigint NOT NULL REFERENCES agents (id),
        conversation_key text COLLATE "C" NOT NULL,
        daemon text NOT NULL,
        reason text NOT NULL,
        asked_by text,
        asked_on text NOT NULL,
        asked_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        taken boolean NOT NULL DEFAULT false,
        answered boolean NOT NULL DEFAULT false,
        run_id text,
        answered_by text
    )""",
    "CREATE INDEX stop_asks_waiting ON stop_asks (daemon) WHERE NOT taken",
)

# %(agent)s, %(key)s, %(reason)s, %(by)s, %(me)s -> (id) when another daemon holds the turn claim
ASK = f"""WITH gone AS (DELETE FROM stop_asks WHERE asked_at < clock_timestamp() - interval '10 minutes'),
asked AS (
    INSERT INTO stop_asks (agent_id, conversation_key, daemon, reason, asked_by, asked_on)
    SELECT t.agent_id, t.conversation_key, t.daemon, %(reason)s, %(by)s, %(me)s
      FROM claim_tickets t
     WHERE t.agent_id = (SELECT a.id FROM agents a WHERE a.name = %(agent)s)
       AND t.conversation_key = %(key)s AND t.purpose = 'turn' AND t.granted
       AND t.expires_at > clock_timestamp() AND t.daemon <> %(me)s
     LIMIT 1
    RETURNING id, daemon)
SELECT id, pg_notify('{STOP_CHANNEL}', 'ask:' || daemon) FROM asked"""

# (daemon) -> the asks addressed to it not handed out yet, each handed out once
TAKE = """UPDATE stop_asks s SET taken = true FROM agents a
 WHERE a.id = s.agent_id AND s.daemon = %s AND NOT s.taken
RETURNING s.id, a.name, s.conversation_key, s.reason, s.asked_by, s.asked_on"""

# (run id, answering daemon, ask id)
ANSWER = f"""WITH done AS (
    UPDATE stop_asks SET answered = true, run_id = %s, answered_by = %s WHERE id = %s AND NOT answered
    RETURNING id)
SELECT pg_notify('{STOP_CHANNEL}', 'done:' || id) FROM done"""

# (ask id) -> (run id, answering daemon) once answered; the row goes
COLLECT = "DELETE FROM stop_asks WHERE id = %s AND answered RETURNING run_id, answered_by"

# (ask id) -> (answered, run id, answering daemon): the asker gives up; an answer that came meanwhile stands
WITHDRAW = "DELETE FROM stop_asks WHERE id = %s RETURNING answered, run_id, answered_by"
