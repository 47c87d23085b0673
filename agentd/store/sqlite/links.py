"""Accounts linked into one person, and the one-time codes that link them (the daemon's own file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from agentd.store.link_queries import LinkedBy, People, PeopleVersion, PersonAccounts, PersonOf
from agentd.store.link_writes import (
    AlreadyLinked,
    IssueLinkCode,
    LinkAccounts,
    RedeemLinkCode,
    UnlinkAccounts,
)
from agentd.store.records import Linked, RedeemedCode
from agentd.store.sqlite.handlers import handles

_BUMP = "UPDATE people_version SET version = version + 1 WHERE id = 1"


def _people(rows: Iterable[tuple[str, str]]) -> list[Linked]:
    by_person: dict[str, list[str]] = {}
    for person, account in rows:
        by_person.setdefault(person, []).append(account)
    return [Linked(person, tuple(accounts)) for person, accounts in by_person.items()]


@handles(PersonOf)
def person_of(conn: sqlite3.Connection, q: PersonOf) -> Linked | None:
    rows = conn.execute(
        "SELECT person, account FROM person_links"
        " WHERE person = (SELECT person FROM person_links WHERE account = ?) ORDER BY account",
        (q.account,),
    ).fetchall()
    return next(iter(_people(rows)), None)


@handles(PersonAccounts)
def person_accounts(conn: sqlite3.Connection, q: PersonAccounts) -> Linked | None:
    rows = conn.execute(
        "SELECT person, account FROM person_links WHERE person = ? ORDER BY account", (q.person,)
    ).fetchall()
    return next(iter(_people(rows)), None)


@handles(People)
def people(conn: sqlite3.Connection, q: People) -> list[Linked]:
    return _people(conn.execute("SELECT person, account FROM person_links ORDER BY person, account"))


@handles(LinkedBy)
def linked_by(conn: sqlite3.Connection, q: LinkedBy) -> list[Linked]:
    return _people(
        conn.execute(
            "SELECT person, account FROM person_links WHERE source = ? ORDER BY person, account", (q.source,)
        )
    )


@handles(PeopleVersion)
def people_version(conn: sqlite3.Connection, q: PeopleVersion) -> int:
    row = conn.execute("SELECT version FROM people_version WHERE id = 1").fetchone()
    return 0 if row is None else int(row[0])


@handles(LinkAccounts)
def link_accounts(conn: sqlite3.Connection, op: LinkAccounts) -> None:
    if op.keep_others:  # (one writer at a time: nothing can link these between the check and the insert)
        marks = ", ".join("?" * len(op.accounts))
        taken = conn.execute(
            f"SELECT account, person FROM person_links WHERE account IN ({marks}) AND person != ?",
            (*op.accounts, op.person),
        ).fetchone()
        if taken is not None:
            raise AlreadyLinked(f"{taken[0]} is linked to {taken[1]} already")
    conn.executemany(
        "INSERT INTO person_links (account, person, source, linked_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (account) DO UPDATE SET person = excluded.person, source = excluded.source,"
        " linked_at = excluded.linked_at",
        [(account, op.person, op.source, op.now) for account in op.accounts],
    )
    conn.execute(_BUMP)


@handles(UnlinkAccounts)
def unlink_accounts(conn: sqlite3.Connection, op: UnlinkAccounts) -> int:
    gone = 0
    for account in op.accounts:
        gone += conn.execute("DELETE FROM person_links WHERE account = ?", (account,)).rowcount
        conn.execute("DELETE FROM link_codes WHERE account = ?", (account,))
    conn.execute(_BUMP)
    return gone


@handles(IssueLinkCode)
def issue_link_code(conn: sqlite3.Connection, op: IssueLinkCode) -> None:
    conn.execute("DELETE FROM link_codes WHERE expires_at <= ?", (op.now,))
    conn.execute(
        "INSERT INTO link_codes (digest, account, expires_at) VALUES (?, ?, ?)",
        (op.digest, op.account, op.expires_at),
    )


@handles(RedeemLinkCode)
def redeem_link_code(conn: sqlite3.Connection, op: RedeemLinkCode) -> RedeemedCode:
    row = conn.execute(
        "DELETE FROM link_codes WHERE digest = ? RETURNING account, expires_at", (op.digest,)
    ).fetchone()
    if row is None:
        return RedeemedCode(None)
    account, expires_at = row
    return RedeemedCode(None, expired=True) if expires_at <= op.now else RedeemedCode(account)
