"""Budgets' counters, usage per day and rate limits' buckets (in the daemon's own file): one writer,
the daemon owning the folder, so a check and its addition in one transaction are atomic."""

from __future__ import annotations

import sqlite3

from agentd.store.budget_queries import PersonUsage, SpendOf, UsageRows
from agentd.store.budget_writes import AddSpend, RecordUsage, ReserveSpend, TakeToken
from agentd.store.sqlite.handlers import handles
from agentd.store.usage_rows import UsageRow

_USED = "SELECT used FROM budget_spend WHERE budget = ? AND subject = ? AND period = ?"
_ADD = (
    "INSERT INTO budget_spend (budget, subject, period, used) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (budget, subject, period) DO UPDATE SET used = used + excluded.used"
)


def _used(conn: sqlite3.Connection, key: tuple[str, str, str]) -> int:
    row = conn.execute(_USED, key).fetchone()
    return 0 if row is None else int(row[0])


@handles(ReserveSpend)
def reserve_spend(conn: sqlite3.Connection, op: ReserveSpend) -> tuple[int, bool] | None:
    for index, (key, _) in enumerate(op.entries):
        if _used(conn, (key.budget, key.subject, key.period)) >= key.limit:
            told = conn.execute(  # (a limit of 0 refuses a counter that has no row yet)
                "INSERT INTO budget_spend (budget, subject, period, told) VALUES (?, ?, ?, 1)"
                " ON CONFLICT (budget, subject, period) DO UPDATE SET told = 1 WHERE told = 0",
                (key.budget, key.subject, key.period),
            )
            return index, told.rowcount == 1
    conn.executemany(_ADD, [(k.budget, k.subject, k.period, amount) for k, amount in op.entries])
    return None


@handles(AddSpend)
def add_spend(conn: sqlite3.Connection, op: AddSpend) -> None:
    conn.executemany(_ADD, [(k.budget, k.subject, k.period, amount) for k, amount in op.entries if amount])


@handles(SpendOf)
def spend_of(conn: sqlite3.Connection, q: SpendOf) -> list[int]:
    return [_used(conn, key) for key in q.keys]


@handles(RecordUsage)
def record_usage(conn: sqlite3.Connection, op: RecordUsage) -> None:
    r = op.row
    conn.execute(
        "INSERT INTO usage_days (day, agent, who, channel, model, trigger, calls, estimated_calls,"
        " input_tokens, output_tokens, cost_micros) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (day, agent, who, channel, model, trigger) DO UPDATE SET"
        " calls = calls + excluded.calls, estimated_calls = estimated_calls + excluded.estimated_calls,"
        " input_tokens = input_tokens + excluded.input_tokens,"
        " output_tokens = output_tokens + excluded.output_tokens,"
        " cost_micros = cost_micros + excluded.cost_micros",
        (
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
def usage_rows(conn: sqlite3.Connection, q: UsageRows) -> list[UsageRow]:
    sql = f"SELECT {USAGE_COLUMNS} FROM usage_days WHERE day >= ? AND day <= ?"
    params: list[str] = [q.since, q.until]
    for column, value in (("agent", q.agent), ("who", q.who), ("channel", q.channel)):
        if value is not None:
            sql += f" AND {column} = ?"
            params.append(value)
    return [UsageRow(*row) for row in conn.execute(sql + " ORDER BY day, agent, who", params)]


# the bucket as of now: what it held, refilled since, at most full
_AVAILABLE = "min(:capacity, tokens + max(0, excluded.at - at) * :per_s)"


@handles(TakeToken)
def take_token(conn: sqlite3.Connection, op: TakeToken) -> tuple[bool, int]:
    # a token is taken when one is there; else the refusal is counted (every SET reads the old row)
    refused, ended = conn.execute(
        "INSERT INTO rate_buckets (scope, subject, tokens, at) VALUES (:scope, :subject, :capacity - 1, :now)"
        " ON CONFLICT (scope, subject) DO UPDATE SET"
        f" tokens = CASE WHEN {_AVAILABLE} >= 1 THEN {_AVAILABLE} - 1 ELSE tokens END,"
        f" at = CASE WHEN {_AVAILABLE} >= 1 THEN max(at, excluded.at) ELSE at END,"
        f" ended = CASE WHEN {_AVAILABLE} >= 1 THEN refused ELSE 0 END,"
        f" refused = CASE WHEN {_AVAILABLE} >= 1 THEN 0 ELSE refused + 1 END"
        " RETURNING refused, ended",
        {"scope": op.scope, "subject": op.subject, "capacity": op.capacity, "per_s": op.per_s, "now": op.now},
    ).fetchone()
    return (True, int(ended)) if refused == 0 else (False, int(refused))


@handles(PersonUsage)
def person_usage(conn: sqlite3.Connection, q: PersonUsage) -> list[UsageRow]:
    sql = f"SELECT {USAGE_COLUMNS} FROM usage_days WHERE who = ? OR substr(who, instr(who, ':') + 1) = ?"
    return [UsageRow(*row) for row in conn.execute(sql + " ORDER BY day, agent", (q.user_id, q.user_id))]
