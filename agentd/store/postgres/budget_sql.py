"""The DDL of migration 0010_budgets (agentd/store/postgres/migrations.py lists it): the tables of
budgets, usage and rate limits, and the reservation's function (agentd/store/postgres/budgets.py)."""

from __future__ import annotations

# Budgets' counters, usage per day and rate limits' buckets, of the daemon's own store (the `_daemon`
# agent), which every daemon sharing the database charges: a reservation waits on its counter's row.
BUDGETS = (
    """CREATE TABLE budget_spend (
        agent_id bigint NOT NULL REFERENCES agents (id),
        budget text NOT NULL,
        subject text NOT NULL,
        period text NOT NULL,
        used bigint NOT NULL DEFAULT 0,
        told boolean NOT NULL DEFAULT false,  -- the refusal was said (once per counter, by any daemon)
        PRIMARY KEY (agent_id, budget, subject, period)
    )""",
    """CREATE TABLE usage_days (
        agent_id bigint NOT NULL REFERENCES agents (id),
        day text NOT NULL,
        agent text NOT NULL,
        who text NOT NULL,
        channel text NOT NULL,
        model text NOT NULL,
        trigger text NOT NULL,
        calls bigint NOT NULL DEFAULT 0,
        estimated_calls bigint NOT NULL DEFAULT 0,
        input_tokens bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cost_micros bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (agent_id, day, agent, who, channel, model, trigger)
    )""",
    "CREATE INDEX usage_by_who ON usage_days (agent_id, who, day)",
    """CREATE TABLE rate_buckets (
        agent_id bigint NOT NULL REFERENCES agents (id),
        scope text NOT NULL,
        subject text NOT NULL,
        tokens double precision NOT NULL,
        at double precision NOT NULL,
        refused integer NOT NULL DEFAULT 0,  -- events refused in a row (the streak)
        ended integer NOT NULL DEFAULT 0,  -- the streak the last token taken ended
        PRIMARY KEY (agent_id, scope, subject)
    )""",
    # A reservation in one round trip (agentd/store/postgres/budgets.py): its counters' rows are made and
    # locked in one order (two reservations never deadlock), checked in the caller's order, then added
    # to; refused: the 0-based index of the first counter at its limit (nothing added; first_time: that
    # counter had not refused before), else null. The locks are held until the commit that follows in
    # the same pipeline.
    """CREATE FUNCTION agentd_reserve_spend(p_agent bigint, p_budgets text[], p_subjects text[],
        p_periods text[], p_limits bigint[], p_amounts bigint[], OUT refused integer, OUT first_time boolean)
        LANGUAGE plpgsql AS $$
    DECLARE
        n integer := cardinality(p_budgets);
        used_now bigint[] := array_fill(0::bigint, ARRAY[n]);
        spent bigint;
        i integer;
    BEGIN
        FOR i IN SELECT k.o FROM unnest(p_budgets, p_subjects, p_periods) WITH ORDINALITY AS k(b, s, p, o)
                 ORDER BY k.b, k.s, k.p LOOP
            INSERT INTO budget_spend (agent_id, budget, subject, period)
                VALUES (p_agent, p_budgets[i], p_subjects[i], p_periods[i]) ON CONFLICT DO NOTHING;
            SELECT used INTO STRICT spent FROM budget_spend
             WHERE agent_id = p_agent AND budget = p_budgets[i] AND subject = p_subjects[i]
               AND period = p_periods[i] FOR UPDATE;
            used_now[i] := spent;
        END LOOP;
        FOR i IN 1 .. n LOOP
            IF used_now[i] >= p_limits[i] THEN
                UPDATE budget_spend SET told = true
                 WHERE agent_id = p_agent AND budget = p_budgets[i] AND subject = p_subjects[i]
                   AND period = p_periods[i] AND NOT told;
                refused := i - 1;
                first_time := FOUND;
                RETURN;
            END IF;
        END LOOP;
        FOR i IN 1 .. n LOOP
            UPDATE budget_spend SET used = used + p_amounts[i]
             WHERE agent_id = p_agent AND budget = p_budgets[i] AND subject = p_subjects[i]
               AND period = p_periods[i];
        END LOOP;
    END $$""",
)
