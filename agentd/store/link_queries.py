"""The reads of accounts linked into people (the daemon's own store; agentd/engine/linking.py), declared
beside queries.py the same way."""

from __future__ import annotations

from dataclasses import dataclass

from agentd.store.queries import Query
from agentd.store.records import Linked


@dataclass(frozen=True, slots=True)
class PersonOf(Query[Linked | None]):
    """The person an account is linked into, with all of their accounts (None: not linked)."""

    account: str


@dataclass(frozen=True, slots=True)
class PersonAccounts(Query[Linked | None]):
    """A person by name, with all of their accounts (None: no such person)."""

    person: str


@dataclass(frozen=True, slots=True)
class People(Query[list[Linked]]):
    """Every person with linked accounts, by name."""


@dataclass(frozen=True, slots=True)
class LinkedBy(Query[list[Linked]]):
    """Every person's accounts that were linked by `source` (config: agentd.yaml's `people:`), by name."""

    source: str


@dataclass(frozen=True, slots=True)
class PeopleVersion(Query[int]):
    """A number every link and unlink moves: a cache of links is current while it stays."""
