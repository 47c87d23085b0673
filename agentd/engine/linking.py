"""One person, many accounts: which person an account ("telegram:42") is, and linking accounts.

`/link` answers a one-time code (CODE_TTL_S, single use: only its digest is stored); `/link <code>`
sent from another account joins the two, so only someone holding both accounts can link them. The
operator links accounts in agentd.yaml (`people:`), over HTTP and the CLI. Links live in the daemon's
own store; each link and unlink is an audit event there.

Every event is resolved to its person as it reaches an agent (`resolve`), from a cache of links:
dropped at every link or unlink made here, and, on a store several daemons share, whenever the store's
people version moved (one small read per event), so a link made by another daemon holds at the next
message.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentd.clock import SYSTEM_CLOCK, Clock
from agentd.config.people import ACCOUNT_FORM, PERSON_NAME_FORM, is_account, is_person_name
from agentd.events import InboundEvent
from agentd.store.base import Store, write_one
from agentd.store.link_queries import LinkedBy, PeopleVersion, PersonAccounts, PersonOf
from agentd.store.link_queries import People as AllPeople
from agentd.store.link_writes import (
    AlreadyLinked,
    IssueLinkCode,
    LinkAccounts,
    RedeemLinkCode,
    UnlinkAccounts,
)
from agentd.store.records import AuditRecord, Linked
from agentd.store.writes import AppendAudit, Write

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read off one screen, typed on another
CODE_LENGTH = 8  # 31^8 ≈ 8.5e11 codes, each good for CODE_TTL_S
CODE_TTL_S = 600.0
CACHED_ACCOUNTS = 100_000  # past this many the cache starts over (a bound, not an eviction policy)
DAEMON_TRAIL = "daemon"  # the agent column of the daemon's own audit events


class LinkRefused(ValueError):
    """A link or unlink that cannot be made; the message says why, fit to show the person."""


class NoSuchLink(LinkRefused):
    """The person, or the person's account, named is not linked (an HTTP 404)."""


class AccountTaken(LinkRefused):
    """The account is linked into another person already (an HTTP 409): unlink it there first."""


def code_digest(code: str) -> str:
    """What is stored of a code: its SHA-256, after the forgiving reading a person types it with."""
    return hashlib.sha256(re.sub(r"[\s-]", "", code).upper().encode()).hexdigest()


def _new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def _audit(action: str, now: float, **data: Any) -> AppendAudit:
    return AppendAudit(DAEMON_TRAIL, [AuditRecord("person", action, data=data)], now)


Linkage = Callable[[Linked], Awaitable[None]]


class People:
    """The links of one process: resolving accounts, link codes, link and unlink (see the module)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK):
        self.clock = clock
        self._store: Store | None = None
        self._cache: dict[str, Linked | None] = {}
        self._version: int | None = None
        # told after every link made here (the daemon audits memory keys the linked accounts both held)
        self.on_link: list[Linkage] = []

    def attach(self, store: Store) -> None:
        """Keep links in `store` (the daemon's own); until then no account is linked."""
        self._store = store
        self._forget()

    def _forget(self) -> None:
        self._cache.clear()
        self._version = None

    def _held(self) -> Store:
        if self._store is None:
            raise LinkRefused("linking accounts needs the daemon: none runs here")
        return self._store

    async def of(self, account: str) -> Linked | None:
        """The person `account` is linked into, with all of their accounts (None: not linked)."""
        store = self._store
        if store is None:
            return None
        if store.shared:
            version = await store.read(PeopleVersion())
            if version != self._version:
                self._cache.clear()
                self._version = version
        if account not in self._cache:
            if len(self._cache) >= CACHED_ACCOUNTS:
                self._cache.clear()
            self._cache[account] = await store.read(PersonOf(account))
        return self._cache[account]

    async def resolve(self, event: InboundEvent) -> InboundEvent:
        """The event with its person (and the person's accounts) when its account is linked."""
        account = event.account
        if account is None or event.person is not None or self._store is None:
            return event
        linked = await self.of(account)
        if linked is None:
            return event
        return replace(event, person=linked.person, person_accounts=linked.accounts)

    async def show(self, name: str) -> Linked | None:
        """A person by name or by one of their accounts."""
        store = self._held()
        if is_account(name):
            return await self.of(name)
        return await store.read(PersonAccounts(name))

    async def find(self, name: str) -> Linked | None:
        """A person by name, by one of their accounts, or by the bare user id of one ("42": a
        data-subject request names a person as the channels gave them)."""
        linked = await self.show(name) if is_person_name(name) or is_account(name) else None
        if linked is not None:
            return linked
        for candidate in await self.everyone():
            if any(account.split(":", 1)[1] == name for account in candidate.accounts):
                return candidate
        return None

    async def everyone(self) -> list[Linked]:
        return await self._held().read(AllPeople())

    # -- codes -------------------------------------------------------------------------------------

    async def issue_code(self, account: str) -> str:
        """A one-time code for `account`, good for CODE_TTL_S."""
        now = self.clock.time()
        code = _new_code()
        await self._held().write(
            IssueLinkCode(code_digest(code), account, now + CODE_TTL_S, now),
            _audit("link_code", now, account=account),
        )
        return code

    async def redeem(self, code: str, account: str) -> Linked:
        """Join the account a code was issued to and `account` (the one sending the code)."""
        store = self._held()
        now = self.clock.time()
        found = await write_one(store, RedeemLinkCode(code_digest(code), now))
        if found.expired:
            await store.write(_audit("link_refused", now, account=account, reason="expired"))
            raise LinkRefused(
                "That code has expired: send /link again from your other account for a new one."
            )
        if found.account is None:
            await store.write(_audit("link_refused", now, account=account, reason="unknown"))
            raise LinkRefused(
                "That code is not one I gave, or it was used already: send /link from your other "
                "account for a new one."
            )
        if found.account == account:
            raise LinkRefused("Send that code from your other account, not from the one that asked for it.")
        return await self.join(found.account, account, "code", by=account)

    # -- links -------------------------------------------------------------------------------------

    async def join(self, first: str, second: str, source: str, by: str) -> Linked:
        """Link two accounts: into the person either is already (the first's when both are: the
        second's person joins it whole), else into a new person."""
        a, b = await self.of(first), await self.of(second)
        if a is not None and b is not None and a.person == b.person:
            return a
        person = (
            a.person if a is not None else b.person if b is not None else f"person-{secrets.token_hex(4)}"
        )
        accounts = {first, second, *(a.accounts if a else ()), *(b.accounts if b else ())}
        return await self.link(person, sorted(accounts), source, by)

    async def link(
        self, person: str, accounts: Sequence[str], source: str, by: str, *, keep_others: bool = False
    ) -> Linked:
        """Link the accounts into `person` (moving any from another person; with `keep_others`, one of
        another person refuses the link: AccountTaken); audited. Accounts the person holds already are
        left as they were linked (their `source` stays: declare reads it)."""
        _check(person, accounts)
        store = self._held()
        current = await store.read(PersonAccounts(person))
        new = [a for a in accounts if current is None or a not in current.accounts]
        if not new:
            assert current is not None
            return current
        now = self.clock.time()
        ops: list[Write[Any]] = [
            LinkAccounts(person, tuple(new), source, now, keep_others),
            _audit("link", now, person=person, accounts=new, source=source, by=by),
        ]
        try:
            await store.write(*ops)
        except AlreadyLinked as e:  # (another daemon linked it since this one looked: nothing written)
            raise AccountTaken(f"{e}: unlink it there first") from None
        self._forget()
        linked = await store.read(PersonAccounts(person))
        assert linked is not None
        for told in self.on_link:
            await told(linked)
        return linked

    async def add_account(self, person: str, account: str, source: str, by: str) -> tuple[Linked, bool]:
        """The operator links `account` into `person` (made here when new); an account of another
        person is refused rather than moved. Returns the person and whether anything changed."""
        _check(person, [account])
        current = await self.of(account)
        if current is not None and current.person != person:
            raise AccountTaken(f"{account} is linked to {current.person} already: unlink it there first")
        if current is not None:
            return current, False
        return await self.link(person, [account], source, by, keep_others=True), True

    async def remove_account(self, person: str, account: str, source: str, by: str) -> Linked | None:
        """The operator takes `account` out of `person` (unlink's rule: a person left with one
        account goes whole). Returns the person as they are now (None: no longer linked)."""
        _check(person, [account])
        linked = await self._held().read(PersonAccounts(person))
        if linked is None:
            raise NoSuchLink(f"no person named {person!r} has linked accounts")
        if account not in linked.accounts:
            raise NoSuchLink(f"{account} is not one of {person}'s accounts ({', '.join(linked.accounts)})")
        await self.unlink(account, source, by)
        return await self._held().read(PersonAccounts(person))

    async def unlink(self, account: str, source: str, by: str) -> Linked:
        """Take `account` out of its person (a person left with one account is no person any more:
        that one goes too); returns the person as it was. Audited."""
        linked = await self.of(account)
        if linked is None:
            raise LinkRefused(f"{account} is not linked to any other account.")
        rest = [a for a in linked.accounts if a != account]
        gone = (account, *rest) if len(rest) == 1 else (account,)
        now = self.clock.time()
        await self._held().write(
            UnlinkAccounts(gone),
            _audit("unlink", now, person=linked.person, accounts=list(gone), source=source, by=by),
        )
        self._forget()
        return linked

    async def drop(self, linked: Linked) -> None:
        """Forget a person's links and codes (their erasure, which audits itself)."""
        await self._held().write(UnlinkAccounts(linked.accounts))
        self._forget()

    async def declare(self, declared: Mapping[str, Iterable[str]]) -> None:
        """agentd.yaml's `people:` at start: each account linked into its person unless it is already;
        an account the file linked before and declares no more (for that person) is unlinked, by
        unlink's rule. Links made otherwise (codes, HTTP, the CLI) are the file's to keep."""
        wanted = {person: sorted(set(accounts)) for person, accounts in declared.items()}
        for person, accounts in wanted.items():
            await self.link(person, accounts, "config", "config")
        for linked in await self._held().read(LinkedBy("config")):
            for account in linked.accounts:
                if account in wanted.get(linked.person, ()):
                    continue
                current = await self.of(account)  # (None: unlinked above, as the last of its person)
                if current is not None and current.person == linked.person:
                    await self.unlink(account, "config", "config")


def _check(person: str, accounts: Sequence[str]) -> None:
    if not is_person_name(person):
        raise LinkRefused(f"{person!r} is not a person's name ({PERSON_NAME_FORM})")
    if not accounts:
        raise LinkRefused("name at least one account")
    for account in accounts:
        if not is_account(account):
            raise LinkRefused(f"{account!r} is not an account ({ACCOUNT_FORM})")
