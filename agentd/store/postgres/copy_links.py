"""`agentd store copy` of the daemon's links (accounts linked into one person) into the database.

Links are daemon-wide in the database (no agent column: every daemon sharing it reads the same ones),
so they are not an agent's table: the rows of the file's `person_links` are added beside what the
database holds. An account the database links already stays as it is there; one it links into
another person is reported and left (the database is what running daemons already act on). The
people version moves when anything was added, so a daemon on the database reads links again at its
next event. Link codes are not copied: each is good for minutes and is asked for again with /link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from agentd.store.copy_tables import Row

LINK_COLUMNS = ("account", "person", "source", "linked_at")


@dataclass
class LinksCopy:
    """What became of the file's links."""

    in_file: int = 0
    copied: int = 0
    already: int = 0
    # (account, the file's person, the database's person): left as the database has it
    elsewhere: list[tuple[str, str, str]] = field(default_factory=list)


def copy_links(conn: psycopg.Connection[Any], rows: Sequence[Row]) -> LinksCopy:
    """Add the file's links (`LINK_COLUMNS` rows) the database lacks, in one transaction."""
    result = LinksCopy(in_file=len(rows))
    if not rows:
        return result
    with conn.transaction():
        held = dict(
            conn.execute(
                "SELECT account, person FROM person_links WHERE account = ANY(%s) FOR UPDATE",
                ([row[0] for row in rows],),
            ).fetchall()
        )
        new = [row for row in rows if row[0] not in held]
        for account, person, *_ in rows:
            if account in held:
                if held[account] == person:
                    result.already += 1
                else:
                    result.elsewhere.append((account, person, held[account]))
        if new:
            with (
                conn.cursor() as cur,
                cur.copy(f"COPY person_links ({', '.join(LINK_COLUMNS)}) FROM STDIN") as copy,
            ):  # type: ignore[arg-type]
                for row in new:
                    copy.write_row(row)
            conn.execute("UPDATE people_version SET version = version + 1 WHERE id = 1")
        result.copied = len(new)
    return result
