"""Persistent memory: facts the agent chose to keep, visible from every conversation.

The system prompt carries only the keys held (progressive disclosure); the
model pulls a value with `recall`, which quotes it in a remembered block (data,
not instructions: agentd/providers/remembered.py). Every remember/forget is
committed together with its audit event `{kind: memory, action, key}` (never
the value); reads are not audited. A value is screened for secrets before it
is written (`memory.secrets`, agentd/memory/screening.py).

With `persistent_scope: user`, a person whose accounts are linked reads the memories of every one of
them (`linked`): a key held by several is the newest value's; a write goes to the writing account's
own scope, and a forget deletes the key from all of them. So an unlink leaves each account what it
wrote (agentd/engine/linking.py).

Keys are not quoted: they are names of at most 64 letters, digits and `_ . : -`,
which can neither hold a sentence nor close a block.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from agentd.config.models import MemorySpec
from agentd.errors import ToolError
from agentd.memory.base import linked_partitions, speaker_partition
from agentd.memory.screening import REDACTED, SecretScreen
from agentd.providers.remembered import remembered_block
from agentd.store.base import Store
from agentd.store.queries import Memories, MemoryKeys, MemoryValue
from agentd.store.records import AuditRecord
from agentd.store.writes import AppendAudit, DeleteMemory, RowMissing, UpsertMemory

KEY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
AGENT_SCOPE = ""

PREAMBLE = (
    "You have persistent memory — facts and preferences that survive across conversations and restarts. "
    "Use recall to read one, list_memories to browse, remember to save or update one, forget to delete one."
)


def persistent_scope(memory: MemorySpec, conversation_key: str, user_id: str | None) -> str:
    """Whose persistent facts a turn reads and writes: the agent's, or only the speaker's."""
    if memory.persistent_scope == "user":
        return speaker_partition(conversation_key, user_id)
    return AGENT_SCOPE


def linked_scopes(memory: MemorySpec, linked: Sequence[str]) -> tuple[str, ...]:
    """The scopes of the speaker's other accounts, read with their own (persistent_scope user only)."""
    return linked_partitions(linked) if memory.persistent_scope == "user" else ()


def memory_preamble(keys: list[str]) -> str:
    if not keys:
        return PREAMBLE + "\nYou hold no memories yet."
    return PREAMBLE + " Keys you already have:\n" + "\n".join(f"- {k}" for k in keys)


class PersistentMemory:
    """One agent's memories table, with the keys of every scope cached in memory."""

    def __init__(self, store: Store, agent: str, max_value_chars: int = 4000, secrets: str = "redact"):
        self.store = store
        self.agent = agent
        self.max_value_chars = max_value_chars
        self.secrets = secrets  # memory.secrets: redact | refuse | allow (agentd/memory/screening.py)
        self._keys: dict[str, list[str]] = {}
        self._version: int | None = None  # the store's memories version the keys were read at

    async def load(self) -> None:
        self._keys = await self.store.read(MemoryKeys())

    async def sync(self, version: int) -> None:
        """Read the keys again when another daemon changed them (a shared store's claim says so)."""
        if version != self._version:
            await self.load()
            self._version = version

    def keys(self, scope: str = AGENT_SCOPE, linked: Sequence[str] = ()) -> list[str]:
        if not linked:
            return list(self._keys.get(scope, ()))
        return sorted({k for s in (scope, *linked) for k in self._keys.get(s, ())})

    def holding(self, key: str, scope: str, linked: Sequence[str]) -> list[str]:
        """The scopes among `scope` and `linked` that hold `key`."""
        return [s for s in (scope, *linked) if key in self._keys.get(s, ())]

    async def _newest(self, key: str, scopes: Sequence[str]) -> str | None:
        """The value of `key` written last among these scopes (a key two linked accounts held)."""
        found = [m for s in scopes for m in await self.store.read(Memories(s)) if m["key"] == key]
        return max(found, key=lambda m: m["updated_at"])["value"] if found else None

    def _check_key(self, key: object) -> str:
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise ToolError(
                f"invalid key {key!r}: use 1-64 characters of letters, digits, '_', '.', ':' or '-'"
            )
        return key

    async def remember(
        self,
        key: object,
        value: object,
        *,
        scope: str = AGENT_SCOPE,
        conversation_key: str | None,
        run_id: str | None,
    ) -> str:
        key = self._check_key(key)
        if not isinstance(value, str) or not value.strip():
            raise ToolError("value must be non-empty text")
        if len(value) > self.max_value_chars:
            raise ToolError(
                f"value is {len(value)} characters; the limit is {self.max_value_chars}. Shorten it."
            )
        screen = SecretScreen(self.secrets, tool="remember")
        # a key is a name (in every prompt, in the audit trail): one holding a secret is never kept
        named_a_secret = screen.text(key, "memory_key") != key
        value = screen.text(value, "memory")
        if named_a_secret or screen.refuses:
            raise await screen.refuse(self.store, self.agent, conversation_key, run_id)
        now = time.time()
        data = {"key": key} if not scope else {"key": key, "scope": scope}
        audits = [
            AuditRecord("memory", "remember", conversation_key, run_id, data),
            *screen.audits(REDACTED, conversation_key, run_id),
        ]
        created, _ = await self.store.write(
            UpsertMemory(scope, key, value, run_id, now), AppendAudit(self.agent, audits, now)
        )
        if created:
            self._keys.setdefault(scope, []).append(key)
            self._keys[scope].sort()
        return (f"Remembered {key}." if created else f"Updated {key}.") + screen.note()

    async def recall(self, key: object, *, scope: str = AGENT_SCOPE, linked: Sequence[str] = ()) -> str:
        """What the model reads: the value quoted in a remembered block (data, not instructions)."""
        key = self._check_key(key)
        holding = self.holding(key, scope, linked)
        if len(holding) > 1:
            value = await self._newest(key, holding)
        else:
            value = await self.store.read(MemoryValue(holding[0] if holding else scope, key))
        if value is None:
            held = ", ".join(self.keys(scope, linked)) or "none"
            raise ToolError(f"no memory with key {key!r}; keys held: {held}")
        return remembered_block("persistent memory", f"The value remembered under the key {key}.", value)

    def list(self, *, scope: str = AGENT_SCOPE, linked: Sequence[str] = ()) -> str:
        keys = self.keys(scope, linked)
        return "Keys held: " + ", ".join(keys) if keys else "No memories held."

    async def forget(
        self,
        key: object,
        *,
        scope: str = AGENT_SCOPE,
        conversation_key: str | None,
        run_id: str | None,
        by: str | None = None,
        linked: Sequence[str] = (),
    ) -> str:
        """Delete a key (the `forget` tool, or `by` someone through the API) from the scope and the
        linked scopes holding it; ToolError when none does."""
        key = self._check_key(key)
        now = time.time()
        scopes = self.holding(key, scope, linked) or [scope]
        audits = []
        for held in scopes:
            data = {"key": key} if not held else {"key": key, "scope": held}
            if by is not None:
                data["by"] = by
            audits.append(AuditRecord("memory", "forget", conversation_key, run_id, data))
        deletes = [DeleteMemory(held, key, must_exist=True) for held in scopes]
        try:
            await self.store.write(*deletes, AppendAudit(self.agent, audits, now))
        except RowMissing:
            raise ToolError(f"no memory with key {key!r}") from None
        for held in scopes:
            if key in self._keys.get(held, []):
                self._keys[held].remove(key)
        return f"Forgot {key}."
