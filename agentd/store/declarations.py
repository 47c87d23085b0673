"""What a write declares about itself in its fields, so no list of writes is kept beside them.

Two facts about a write (agentd/store/writes.py) are read from its fields, not from lists kept beside
them, so a new write is handled once it says so:

- the store records the writing daemon on a write with a `daemon` field, and on a record it carries
  that has one (a run row): `writes.stamped`;
- agentd/memory/screening.py screens for secrets the fields declared as memory text
  (`field(metadata=memory_text("fact"))`), and what a write's own `screened(screen)` screens when its
  text is nested in records (InsertEpisodes, PutLayerState). tests/test_write_declarations.py fails
  for a write with text that declares neither and is not listed exempt with a reason.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any, Protocol, get_type_hints

MEMORY_TEXT = "memory_text"  # field metadata: the field holds memory text; its value names what it is


def memory_text(write: str) -> dict[str, str]:
    """The metadata of a field holding memory text, screened for secrets as `write` (memory, fact,
    compaction ...): `value: str = field(metadata=memory_text("memory"))`."""
    return {MEMORY_TEXT: write}


class TextScreen(Protocol):
    """What a write with nested memory text screens it with (agentd.memory.screening.SecretScreen)."""

    def text(self, text: str, write: str) -> str: ...

    def value(self, value: Any, write: str) -> Any: ...


_MEMORY_TEXT_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}
_DAEMON_FIELDS: dict[type, tuple[bool, tuple[str, ...]]] = {}


def memory_text_fields(kind: type) -> tuple[tuple[str, str], ...]:
    """(field, what it is) for each field of a write declared with `memory_text` (read once per kind)."""
    found = _MEMORY_TEXT_FIELDS.get(kind)
    if found is None:
        found = tuple((f.name, f.metadata[MEMORY_TEXT]) for f in fields(kind) if MEMORY_TEXT in f.metadata)
        _MEMORY_TEXT_FIELDS[kind] = found
    return found


def daemon_fields(kind: type) -> tuple[bool, tuple[str, ...]]:
    """Whether a write has a `daemon` field, and its fields holding a record with one (a run row);
    read once per kind."""
    found = _DAEMON_FIELDS.get(kind)
    if found is None:
        hints = get_type_hints(kind)
        carried = tuple(
            f.name
            for f in fields(kind)
            if is_dataclass(hint := hints[f.name]) and any(g.name == "daemon" for g in fields(hint))
        )
        found = _DAEMON_FIELDS[kind] = (any(f.name == "daemon" for f in fields(kind)), carried)
    return found
