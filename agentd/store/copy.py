"""Moving up: every agent's SQLite file of a data folder copied into a PostgreSQL database.

`copy_folder` migrates the database (it may be new), then copies each `<name>.sqlite` of the folder
as agent `name` (`_daemon.sqlite`, the daemon's own trail, as `_daemon`), one transaction per agent:
agentd/store/copy_tables.py says what is copied and how ids and what refers to them are carried
over, agentd/store/copy_plan.py why a second run copies nothing twice and how each table is
verified, agentd/store/copy_chain.py how the audit chain is carried over. An agent that cannot be
copied (a row differs, its audit chain does not verify, its file is unreadable or from a newer
agentd) is reported and changes nothing; the others are copied all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from agentd.errors import AgentdError, OperatorError
from agentd.store.copy_chain import ChainCopy
from agentd.store.copy_plan import TableCopy
from agentd.store.copy_tables import PERSON_LINKS
from agentd.store.postgres.connection import as_store_error, connect, label_of
from agentd.store.postgres.copy_in import copy_agent
from agentd.store.postgres.copy_links import LinksCopy, copy_links
from agentd.store.postgres.migrations import migrate
from agentd.store.sqlite.copy_out import AgentFile

FILE_SUFFIX = ".sqlite"
OnTable = Callable[[str, TableCopy], None]  # told each table of each agent once it is copied and checked


@dataclass
class AgentCopy:
    """What became of one agent's file."""

    agent: str
    path: Path
    tables: list[TableCopy] = field(default_factory=list)
    migrated: list[str] = field(default_factory=list)  # the file's own migrations, applied first
    refused: str | None = None  # why nothing of it was copied
    links: LinksCopy | None = None  # the daemon's links, when its file holds any

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables)

    @property
    def already(self) -> int:
        return sum(t.already for t in self.tables)

    @property
    def chain(self) -> ChainCopy | None:
        """Where the file's audit events went in the database's chain, when any were copied now."""
        return next((t.chain for t in self.tables if t.chain is not None), None)


def agent_files(data_dir: Path, names: Sequence[str] = ()) -> list[tuple[str, Path]]:
    """The agents' files of the folder (only `names`, when given: each must have one), by name."""
    if not data_dir.is_dir():
        raise OperatorError(f"no data folder {data_dir}")
    found = {p.name[: -len(FILE_SUFFIX)]: p for p in data_dir.glob(f"*{FILE_SUFFIX}") if p.is_file()}
    if names:
        missing = [n for n in names if n not in found]
        if missing:
            raise OperatorError(f"no data file for {', '.join(missing)} in {data_dir}")
        return [(n, found[n]) for n in dict.fromkeys(names)]
    return sorted(found.items())


def copy_folder(
    data_dir: Path, url: str, names: Sequence[str] = (), on_table: OnTable | None = None
) -> list[AgentCopy]:
    """Copy the agents' files of `data_dir` (or only `names`) into the database at `url`."""
    files = agent_files(data_dir, names)
    label = label_of(url)
    try:
        conn = connect(url)
    except psycopg.Error as e:
        raise as_store_error(label, e) from e
    results = []
    try:
        try:
            migrate(conn)
        except psycopg.Error as e:
            raise as_store_error(label, e) from e
        for agent, path in files:
            results.append(_copy_one(conn, label, agent, path, on_table))
    finally:
        conn.close()
    return results


def _copy_one(
    conn: psycopg.Connection[object], label: str, agent: str, path: Path, on_table: OnTable | None
) -> AgentCopy:
    result = AgentCopy(agent, path)

    def told(table: TableCopy) -> None:
        if on_table is not None:
            on_table(agent, table)

    try:
        with AgentFile(path) as source:
            result.migrated = source.migrated
            verdict = source.audit_verdict(agent)
            if not verdict.ok:
                result.refused = (
                    f"its audit trail does not verify: event {verdict.broken}: {verdict.reason} "
                    "(copied, it would be chained anew and verify)"
                )
                return result
            result.tables = copy_agent(conn, agent, source.rows, told)
            links = source.rows(PERSON_LINKS)  # (only the daemon's own file holds any)
            if links:
                try:
                    result.links = copy_links(conn, links)
                except psycopg.Error as e:  # (its tables are in, verified: only the links are not)
                    result.refused = (
                        f"its links were not copied (its tables were): {as_store_error(label, e)}"
                    )
    except psycopg.Error as e:
        result.refused = str(as_store_error(label, e))
    except AgentdError as e:
        result.refused = str(e)
    return result
