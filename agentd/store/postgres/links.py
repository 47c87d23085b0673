"""Accounts linked into one person, and the one-time codes that link them, on PostgreSQL.

The tables are daemon-wide (no agent column): every daemon sharing the database reads the same links,
and `people_version` tells a daemon's cache when another one changed them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentd.store.link_queries import LinkedBy, People, PeopleVersion, PersonAccounts, PersonOf
from agentd.store.link_writes import (
    AlreadyLinked,
    IssueLinkCode,
    LinkAccounts,
    RedeemLinkCode,
    UnlinkAccounts,
)
from agentd.store.postgres.handlers import Cx, Later, handles
from agentd.store.records import Linked, RedeemedCode

_BUMP = "UPDATE people_version SET version = version + 1 WHERE id = 1"


def _people(rows: Iterable[Any]) -> list[Linked]:
    by_person: dict[str, list[str]] = {}
    for person, account in rows:
        by_person.setdefault(person, []).append(account)
    return [Linked(person, tuple(accounts)) for person, accounts in by_person.items()]


@handles(PersonOf)
def person_of(cx: Cx, q: PersonOf) -> Later[Linked | None]:
    cur = cx.run(
        "SELECT person, account FROM person_links"
        " WHERE person = (SELECT person FROM person_links WHERE account = %s) ORDER BY account",
        (q.account,),
    )
    return Later(lambda: next(iter(_people(cur.fetchall())), None))


@handles(PersonAccounts)
def person_accounts(cx: Cx, q: PersonAccounts) -> Later[Linked | None]:
    cur = cx.run("SELECT person, account FROM person_links WHERE person = %s ORDER BY account", (q.person,))
    return Later(lambda: next(iter(_people(cur.fetchall())), None))


@handles(People)
def people(cx: Cx, q: People) -> Later[list[Linked]]:
    cur = cx.run("SELECT person, account FROM person_links ORDER BY person, account")
    return Later(lambda: _people(cur.fetchall()))


@handles(LinkedBy)
def linked_by(cx: Cx, q: LinkedBy) -> Later[list[Linked]]:
    cur = cx.run(
        "SELECT person, account FROM person_links WHERE source = %s ORDER BY person, account", (q.source,)
    )
    return Later(lambda: _people(cur.fetchall()))


@handles(PeopleVersion)
def people_version(cx: Cx, q: PeopleVersion) -> Later[int]:
    cur = cx.run("SELECT version FROM people_version WHERE id = 1")
    return Later(lambda: 0 if (row := cur.fetchone()) is None else int(row[0]))


@handles(LinkAccounts, reads_midway=lambda op: op.keep_others)
def link_accounts(cx: Cx, op: LinkAccounts) -> None:
    if op.keep_others:
        # rows of new accounts go in; an account linked already (by a daemon that committed first:
        # the insert waits for it) is read back, and one of another person refuses the batch
        cx.run(
            "INSERT INTO person_links (account, person, source, linked_at)"
            " SELECT account, %s, %s, %s FROM unnest(%s::text[]) AS account ON CONFLICT (account) DO NOTHING",
            (op.person, op.source, op.now, list(op.accounts)),
        )
        taken = cx.run(
            "SELECT account, person FROM person_links WHERE account = ANY(%s) AND person != %s LIMIT 1",
            (list(op.accounts), op.person),
        ).fetchone()
        if taken is not None:
            raise AlreadyLinked(f"{taken[0]} is linked to {taken[1]} already")
        cx.run(_BUMP)
        return
    cx.run(
        "INSERT INTO person_links (account, person, source, linked_at)"
        " SELECT account, %s, %s, %s FROM unnest(%s::text[]) AS account"
        " ON CONFLICT (account) DO UPDATE SET person = excluded.person, source = excluded.source,"
        " linked_at = excluded.linked_at",
        (op.person, op.source, op.now, list(op.accounts)),
    )
    cx.run(_BUMP)


@handles(UnlinkAccounts)
def unlink_accounts(cx: Cx, op: UnlinkAccounts) -> Later[int]:
    accounts = list(op.accounts)
    cur = cx.run("DELETE FROM person_links WHERE account = ANY(%s)", (accounts,))
    cx.run("DELETE FROM link_codes WHERE account = ANY(%s)", (accounts,))
    cx.run(_BUMP)
    return Later(lambda: cur.rowcount)


@handles(IssueLinkCode)
def issue_link_code(cx: Cx, op: IssueLinkCode) -> None:
    cx.run("DELETE FROM link_codes WHERE expires_at <= %s", (op.now,))
    cx.run(
        "INSERT INTO link_codes (digest, account, expires_at) VALUES (%s, %s, %s)",
        (op.digest, op.account, op.expires_at),
    )


@handles(RedeemLinkCode)
def redeem_link_code(cx: Cx, op: RedeemLinkCode) -> Later[RedeemedCode]:
    cur = cx.run("DELETE FROM link_codes WHERE digest = %s RETURNING account, expires_at", (op.digest,))

    def read() -> RedeemedCode:
        row = cur.fetchone()
        if row is None:
            return RedeemedCode(None)
        account, expires_at = row
        return RedeemedCode(None, expired=True) if expires_at <= op.now else RedeemedCode(account)

    return Later(read)
