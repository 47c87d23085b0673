"""The writes that link accounts into persons (agentd/engine/linking.py): links, unlinks and the
one-time codes of /link. Beside writes.py, declared the same way, handled by each backend's links.py."""

from __future__ import annotations

from dataclasses import dataclass

from agentd.store.records import RedeemedCode
from agentd.store.writes import Write


class AlreadyLinked(LookupError):
    """A link that keeps others' accounts found one linked into another person; its batch was rolled
    back (the message names the account and its person)."""


@dataclass(frozen=True, slots=True)
class LinkAccounts(Write[None]):
    """Link each account into `person` (taking it from any person it was in; with `keep_others`, an
    account of another person refuses the batch instead: AlreadyLinked, decided in the transaction, so
    two daemons linking one account at once cannot both succeed); `source` says how (code | config |
    http | cli). Moves the people version."""

    person: str
    accounts: tuple[str, ...]
    source: str
    now: float
    keep_others: bool = False


@dataclass(frozen=True, slots=True)
class UnlinkAccounts(Write[int]):
    """Unlink the accounts and drop the link codes issued to them; the result is how many links went.
    Moves the people version."""

    accounts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IssueLinkCode(Write[None]):
    """Keep a link code's digest (never the code) for `account` until `expires_at`; codes expired by
    `now` go."""

    digest: str
    account: str
    expires_at: float
    now: float


@dataclass(frozen=True, slots=True)
class RedeemLinkCode(Write[RedeemedCode]):
    """Take the code with this digest, once: it is deleted whether it was still good or expired."""

    digest: str
    now: float
