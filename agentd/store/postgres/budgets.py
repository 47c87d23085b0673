"""Budgets' counters, usage per day and rate limits' buckets (in the daemon's own rows, `_daemon`),
shared by every daemon of the database: a reservation (the function agentd_reserve_spend of migration
0010_budgets, one round trip) locks its counters' rows in a fixed order before it checks and adds, so
concurrent ones queue rather than both pass a check; a bucket's token is taken by one conditional
upsert."""

from __future__ import annotations

from typing import Any

from agentd.store.budget_queries import PersonUsage, SpendOf, UsageRows
from agentd.store.budget_writes import AddSpend, RecordUsage, ReserveSpend, SpendKey, TakeToken
from agentd.store.postgres.handlers import Cx, Later, handles, rows
from agentd.store.usage_rows import UsageRow

_ADD = (
    "INSERT INTO budget_spend (agent_id, budget, subject, period, used) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (agent_id, budget, subject, period) DO UPDATE SET used = budget_spend.used + excluded.used"
)


def _key(k: SpendKey) -> tuple[str, str, str]:
    return (k.budget, k.subject, k.period)


@handles(ReserveSpend)
def reserve_spend(cx: Cx, op: ReserveSpend) -> Later[tuple[int, bool] | None]:
    keys = [k for k, _ in op.entries]
    cur = cx.run(
        "SELECT refused, first_time FROM agentd_reserve_spend(%s, %s, %s, %s, %s, %s)",
        (
            cx.agent_id,
            [k.budget for k in keys],
            [k.subject for k in keys],
            [k.period for k in keys],
            [k.limit for k in keys],
            [amount for _, amount in op.entries],
        ),
    )
    return Later(lambda: _index(cur.fetchone()))


def _index(row: tuple[Any, ...] | None) -> tuple[int, bool] | None:
    return None if row is None or row[0] is None else (int(row[0]), bool(row[1]))


@handles(AddSpend)
def add_spend(cx: Cx, op: AddSpend) -> None:
    for k, amount in op.entries:
        if amount:
            cx.run(_ADD, (cx.agent_id, *_key(k), amount))


@handles(SpendOf, statements=2)
def spend_of(cx: Cx, q: SpendOf) -> Later[list[int]]:
    cursors = [
        cx.run(
            "SELECT used FROM budget_spend WHERE agent_id = %s AND budget = %s AND subject = %s AND period = %s",
            (cx.agent_id, *key),
        )
        for key in q.keys
    ]
    return Later(lambda: [int(row[0]) if (row := cur.fetchone()) is not None else 0 for cur in cursors])


@handles(RecordUsage)
def record_usage(cx: Cx, op: RecordUsage) -> None:
    r = op.row
    cx.run(
        "INSERT INTO usage_days AS u (agent_id, day, agent, who, channel, model, trigger, calls,"
        " estimated_calls, input_tokens, output_tokens, cost_micros)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (agent_id, day, agent, who, channel, model, trigger) DO UPDATE SET"
        " calls = u.calls + excluded.calls, estimated_calls = u.estimated_calls + excluded.estimated_calls,"
        " input_tokens = u.input_tokens + excluded.input_tokens,"
        " output_tokens = u.output_tokens + excluded.output_tokens,"
        " cost_micros = u.cost_micros + excluded.cost_micros",
        (
            cx.agent_id,
            r.day,
            r.agent,
            r.who,
            r.channel,
            r.model,
            r.trigger,
            r.calls,
            r.estimated_calls,
            r.input_tokens,
            r.output_tokens,
            r.cost_micros,
        ),
    )


USAGE_COLUMNS = "day, agent, who, channel, model, trigger, calls, estimated_calls, input_tokens, output_tokens, cost_micros"


@handles(UsageRows)
def usage_rows(cx: Cx, q: UsageRows) -> Later[list[UsageRow]]:
    sql = f"SELECT {USAGE_COLUMNS} FROM usage_days WHERE agent_id = %s AND day >= %s AND day <= %s"
    params: list[Any] = [cx.agent_id, q.since, q.until]
    for column, value in (("agent", q.agent), ("who", q.who), ("channel", q.channel)):
        if value is not None:
            sql += f" AND {column} = %s"
            params.append(value)
    found = rows(cx.run(sql + " ORDER BY day, agent, who", params))
    return Later(lambda: [UsageRow(*row) for row in found.result()])


_AVAILABLE = "least(%s, b.tokens + greatest(0, excluded.at - b.at) * %s)"


@handles(TakeToken)
def take_token(cx: Cx, op: TakeToken) -> Later[tuple[bool, int]]:
    # one statement: the row lock makes the refill, the check and the take (or the refusal's count) one
    # step across daemons; every SET reads the old row
    available = (op.capacity, op.per_s)
    cur = cx.run(
        "INSERT INTO rate_buckets AS b (agent_id, scope, subject, tokens, at) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (agent_id, scope, subject) DO UPDATE SET"
        f" tokens = CASE WHEN {_AVAILABLE} >= 1 THEN {_AVAILABLE} - 1 ELSE b.tokens END,"
        f" at = CASE WHEN {_AVAILABLE} >= 1 THEN greatest(b.at, excluded.at) ELSE b.at END,"
        f" ended = CASE WHEN {_AVAILABLE} >= 1 THEN b.refused ELSE 0 END,"
        f" refused = CASE WHEN {_AVAILABLE} >= 1 THEN 0 ELSE b.refused + 1 END"
        " RETURNING refused, ended",
        (cx.agent_id, op.scope, op.subject, op.capacity - 1, op.now, *available * 5),
    )
    return Later(lambda: _taken(cur.fetchone()))


def _taken(row: tuple[Any, ...] | None) -> tuple[bool, int]:
    assert row is not None  # (an upsert returns its row)
    refused, ended = int(row[0]), int(row[1])
    return (True, ended) if refused == 0 else (False, refused)


@handles(PersonUsage)
def person_usage(cx: Cx, q: PersonUsage) -> Later[list[UsageRow]]:
    found = rows(
        cx.run(
            f"SELECT {USAGE_COLUMNS} FROM usage_days WHERE agent_id = %s"
            " AND (who = %s OR substr(who, strpos(who, ':') + 1) = %s) ORDER BY day, agent",
            (cx.agent_id, q.user_id, q.user_id),
        )
    )
    return Later(lambda: [UsageRow(*row) for row in found.result()])
