"""Persistent memory: facts the agent chose to keep, visible from every conversation.

The system prompt carries only the keys held (progressive disclosure); the
model pulls a value with `recall`, which quotes it in a remembered block (data,
not instructions: agentd/providers/remembered.py). Every remember/forget is
committed together with its audit event `{kind: memory, action, key}` (never
the value); reads are not audited. A value is screened for secrets before it
is written (`memory.secrets`, agentd/memory/screening.py).

Keys are not quoted: they are names of at most 64 letters, digits and `_ . : -`,
which can neither hold a sentence nor close a block.
"""

from __future__ import annotations

import re
import time

from agentd.config.models import MemorySpec
from agentd.errors import ToolError
from agentd.memory.base import speaker_partition
from agentd.memory.screening import REDACTED, SecretScreen
from agentd.providers.remembered import remembered_block
from agentd.store.base import Store
from agentd.store.queries import MemoryKeys, MemoryValue
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

    def keys(self, scope: str = AGENT_SCOPE) -> list[str]:
        return list(self._keys.get(scope, ()))

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

    async def recall(self, key: object, *, scope: str = AGENT_SCOPE) -> str:
        """What the model reads: the value quoted in a remembered block (data, not instructions)."""
        key = self._check_key(key)
        value = await self.store.read(MemoryValue(scope, key))
        if value is None:
            raise ToolError(f"no memory with key {key!r}; keys held: {', '.join(self.keys(scope)) or 'none'}")
        return remembered_block("persistent memory", f"The value remembered under the key {key}.", value)

    def list(self, *, scope: str = AGENT_SCOPE) -> str:
        keys = self.keys(scope)
        return "Keys held: " + ", ".join(keys) if keys else "No memories held."

    async def forget(
        self,
        key: object,
        *,
        scope: str = AGENT_SCOPE,
        conversation_key: str | None,
        run_id: str | None,
        by: str | None = None,
    ) -> str:
        """Delete a key (the `forget` tool, or `by` someone through the API); ToolError when none."""
        key = self._check_key(key)
        now = time.time()
        data = {"key": key} if not scope else {"key": key, "scope": scope}
        if by is not None:
            data["by"] = by
        audit = AuditRecord("memory", "forget", conversation_key, run_id, data)

        try:
            await self.store.write(
                DeleteMemory(scope, key, must_exist=True), AppendAudit(self.agent, [audit], now)
            )
        except RowMissing:
            raise ToolError(f"no memory with key {key!r}") from None
        if key in self._keys.get(scope, []):
            self._keys[scope].remove(key)
        return f"Forgot {key}."
