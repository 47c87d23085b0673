"""Asking another daemon to stop a turn it runs: `/stop` that reaches a daemon other than the runner's.

On a store several daemons share, a conversation's turn runs on the daemon holding its claim
(agentd.store.claims), while its `/stop` (a webhook call, a chat message) may reach any of them. The
daemon asked writes a stop ask addressed to the holder and waits, bounded, for its answer; the
holder takes the asks addressed to it, stops the turn as its own `/stop` would, and answers with the
stopped run (or none). On a single-owner store (SQLite) no other daemon runs anything: `SoleDaemon`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StopAsk:
    """A stop asked on daemon `asked_on` for a turn this daemon runs."""

    id: int
    agent: str
    conversation_key: str
    reason: str  # agentd.engine.stopping: command | api
    by: str | None  # who asked
    asked_on: str


@dataclass(frozen=True, slots=True)
class StopAnswer:
    """What the running daemon did: the stopped run (None: nothing it runs could be stopped)."""

    run_id: str | None
    daemon: str


class StopAsks(Protocol):
    """The daemon's side of stop asks, both ways."""

    @property
    def daemon(self) -> str:
        """This daemon's id (the one recorded on its runs and audit events)."""
        ...

    async def ask(self, agent: str, conversation_key: str, reason: str, by: str | None) -> int | None:
        """Ask the daemon holding the conversation's turn claim, when that is another one, to stop it;
        the ask's id, None when no other daemon holds it (nothing runs there elsewhere)."""
        ...

    async def answer_of(self, ask_id: int, wait_s: float) -> StopAnswer | None:
        """Wait (at most `wait_s`) for the ask's answer; None when none came, and then the ask is
        withdrawn (a daemon that has not taken it by then never acts on it)."""
        ...

    async def taken(self, wait_s: float) -> list[StopAsk]:
        """The asks addressed to this daemon, each handed out once: those waiting now, else the first
        that arrive within `wait_s` (none when none did)."""
        ...

    async def answer(self, ask_id: int, run_id: str | None) -> None:
        """Answer a taken ask (the asking daemon wakes up)."""
        ...


class SoleDaemon:
    """Stop asks on a single-owner store: there is no other daemon to ask, nor one that asks."""

    def __init__(self, daemon: str):
        self._daemon = daemon

    @property
    def daemon(self) -> str:
        return self._daemon

    async def ask(self, agent: str, conversation_key: str, reason: str, by: str | None) -> int | None:
        return None

    async def answer_of(self, ask_id: int, wait_s: float) -> StopAnswer | None:
        return None

    async def taken(self, wait_s: float) -> list[StopAsk]:
        return []  # (the daemon's loop does not run on a single-owner store)

    async def answer(self, ask_id: int, run_id: str | None) -> None:
        return None
