"""The audit trail's hash chain across `agentd store copy` (agentd/store/audit_chain.py says what each
hash covers). No SQL here: agentd/store/sqlite/copy_out.py verifies the file's chain,
agentd/store/postgres/copy_in.py appends to the database's.

**Nothing tampered with is laundered.** An agent's file is copied only when its chain verifies from
its first event to its head; otherwise the agent is refused, naming the first broken event, and
nothing of it is copied (a copy re-links events, so it would otherwise hand on an edited event under
fresh, valid hashes).

**Appending, not rewriting.** An event's content is copied as it was written (never rewritten: its
hash commits to every top-level key of its data and to its conversation key) with its nonces and
erased commitments, so its digest is the file's. The events not copied yet are appended to the
agent's chain in the database after its head, in the file's order, each linked anew:
`hash = link(prev, seq, digest)`. Where the database's head is where the file's chain stood before
those events — a database that held no event of the agent, or a copy again after the file went on
with nothing audited in the database since — seq and hashes come out the file's, byte for byte.
Otherwise (an agent that started in the database first, or went on there after an earlier copy) the
events get later seqs and other hashes, and the file's own head is reported beside the database's
new one, so that an auditor holding the file's head can tie the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.store.audit_chain import TRAIL_COLUMNS, digest_of, link, stored_event
from agentd.store.copy_tables import Row, Table

_TRAIL = tuple(TRAIL_COLUMNS.split(", "))


@dataclass(frozen=True, slots=True)
class ChainCopy:
    """Where a copy put the file's audit events in the database's chain."""

    after: int  # the database chain's last seq before them (0: it had no event)
    file_first: int  # the first of them in the file
    file_head: tuple[int, str]  # the last of them in the file: seq and hash (hex)
    head: tuple[int, str]  # the database chain's head after them: seq and hash (hex)

    @property
    def kept(self) -> bool:
        """Seq and hashes as in the file, byte for byte."""
        return self.after == self.file_first - 1 and self.head == self.file_head


def relink(
    table: Table, head: tuple[int, bytes], events: Sequence[tuple[Row, Row]]
) -> tuple[list[Row], ChainCopy]:
    """The links (seq, prev_hash, hash) of `events` — each its stored columns (`table.stored`) and its
    links in the file — appended in order after the database chain's `head` (seq, hash)."""
    seq, prev = head
    links: list[Row] = []
    for row, _ in events:
        stored = dict(zip(table.stored, row, strict=True))
        digest = digest_of(stored_event(tuple(stored.get(c) for c in _TRAIL)))
        seq += 1
        hashed = link(prev, seq, digest)
        links.append((seq, prev, hashed))
        prev = hashed
    first, last = events[0][1], events[-1][1]
    chain = ChainCopy(head[0], first[0], (last[0], bytes(last[2]).hex()), (seq, prev.hex()))
    return links, chain
