"""The audit trail's hash chain: what each event's hash covers, and how a chain is verified.

Every store keeps one chain: an agent's trail, and the daemon's own trail (`_daemon`). Event n of a
chain is sealed when it is appended:

    commit(field) = SHA-256(nonce ‖ canon(value))        a fresh 16-byte nonce per field
    digest        = SHA-256(canon({"v": 1, "ts": ts, "agent": …, "kind": …, "action": …,
                                   "run_id": …, "daemon": …,
                                   "conversation_key": commit, "data": {key: commit, …}}))
    hash(n)       = SHA-256(hash(n-1) ‖ n as 8 bytes big-endian ‖ digest)      hash(0) = 32 zero bytes

`canon(x)` is JSON with sorted keys, no spaces and only ASCII (Python's
`json.dumps(x, sort_keys=True, separators=(",", ":"))`). The fields that can name a person — the
conversation key and each top-level key of `data` — enter the digest only through their
commitment. Erasing one later (a person's data erased on request) removes its value and its nonce
and keeps the commitment (in `erased`): the chain still verifies, and the commitment cannot be
checked against guessed values, since the nonce that salted it is gone. The rest of an event (when,
which agent, what kind and action, which run, which daemon) is hashed as it stands.

Editing, deleting, inserting or reordering stored events breaks the chain at that event. Anyone who
can write the database can also recompute a chain from any point onwards (nothing here is secret),
and can cut its tail: both are caught only by comparing with a head (seq and hash) kept elsewhere,
which `agentd audit verify` prints for that purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentd.store.records import AuditRecord

GENESIS = bytes(32)
VERSION = 1
NONCE_BYTES = 16
KEY_FIELD = "conversation_key"
DATA_PREFIX = "data."

_sha256 = hashlib.sha256
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def canon(value: Any) -> bytes:
    """The canonical bytes of a JSON value: sorted keys, no spaces, ASCII only."""
    return _dumps(value).encode("ascii")


def commitment(nonce: bytes, value: Any) -> str:
    return _sha256(nonce + canon(value)).hexdigest()


def link(prev: bytes, seq: int, digest: bytes) -> bytes:
    return _sha256(prev + seq.to_bytes(8, "big") + digest).digest()


def _digest(
    ts: float,
    agent: str,
    kind: str,
    action: str,
    run_id: str | None,
    daemon: str | None,
    key_commitment: str,
    data_commitments: Mapping[str, str],
) -> bytes:
    body = {
        "v": VERSION,
        "ts": float(ts),
        "agent": agent,
        "kind": kind,
        "action": action,
        "run_id": run_id,
        "daemon": daemon,
        KEY_FIELD: key_commitment,
        "data": data_commitments,
    }
    return _sha256(canon(body)).digest()


@dataclass(frozen=True, slots=True)
class Sealed:
    """A new event as stored: its data as JSON text, its nonces (`salts`, JSON), its digest."""

    data: str
    salts: str
    digest: bytes


def seal(record: AuditRecord, ts: float, agent: str, daemon: str | None) -> Sealed:
    """Salt and digest a new event. What is committed is its data as stored (JSON text read back), so
    verifying later sees exactly the values that were hashed."""
    data_json = json.dumps(record.data, separators=(",", ":"))
    data = json.loads(data_json)
    keys = list(data)
    nonces = os.urandom(NONCE_BYTES * (len(keys) + 1))
    salts = {KEY_FIELD: nonces[:NONCE_BYTES].hex()}
    commitments = {}
    for i, key in enumerate(keys, 1):
        nonce = nonces[NONCE_BYTES * i : NONCE_BYTES * (i + 1)]
        salts[DATA_PREFIX + key] = nonce.hex()
        commitments[key] = commitment(nonce, data[key])
    key_commitment = commitment(nonces[:NONCE_BYTES], record.conversation_key)
    digest = _digest(
        ts, agent, record.kind, record.action, record.run_id, daemon, key_commitment, commitments
    )
    return Sealed(data_json, json.dumps(salts, separators=(",", ":")), digest)


def seal_existing(
    rows: Iterable[tuple[float, str, str, str, str | None, str | None, str, str | None]],
    seq: int,
    prev: bytes,
) -> list[tuple[int, str, str, bytes, bytes]]:
    """Chain events written before the chain existed (a migration step), in the order given, after the
    head (seq, prev): per row (ts, agent, kind, action, conversation_key, run_id, data JSON, daemon),
    its (seq, data as sealed, salts, prev_hash, hash)."""
    out = []
    for ts, agent, kind, action, key, run_id, data, daemon in rows:
        sealed = seal(AuditRecord(kind, action, key, run_id, json.loads(data)), ts, agent, daemon)
        seq += 1
        digest = link(prev, seq, sealed.digest)
        out.append((seq, sealed.data, sealed.salts, prev, digest))
        prev = digest
    return out


class Unverifiable(ValueError):
    """A stored event whose fields cannot be committed to (a field without nonce or commitment)."""


def _committed(field: str, value: Any, salts: Mapping[str, str], erased: Mapping[str, str]) -> str:
    kept = erased.get(field)
    if kept is not None:
        if value is not None:  # an erased field holds nothing: a value there would not be covered
            raise Unverifiable(f"{field} was erased but holds a value")
        return kept
    nonce = salts.get(field)
    if nonce is None:
        raise Unverifiable(f"{field} has neither a nonce nor a commitment")
    return commitment(bytes.fromhex(nonce), value)


def digest_of(event: Mapping[str, Any]) -> bytes:
    """The digest of a stored event (a row as `AuditTrail` reads it: values, salts, erased)."""
    salts, erased, data = event["salts"], event["erased"], event["data"]
    names = set(data) | {f[len(DATA_PREFIX) :] for f in erased if f.startswith(DATA_PREFIX)}
    commitments = {
        name: _committed(DATA_PREFIX + name, data.get(name), salts, erased) for name in sorted(names)
    }
    key_commitment = _committed(KEY_FIELD, event[KEY_FIELD], salts, erased)
    return _digest(
        event["ts"],
        event["agent"],
        event["kind"],
        event["action"],
        event["run_id"],
        event["daemon"],
        key_commitment,
        commitments,
    )


@dataclass(frozen=True, slots=True)
class Erased:
    """A stored event with some fields erased: what to write back."""

    data: str
    conversation_key: str | None
    salts: str
    erased: str


def erase_fields(event: Mapping[str, Any], fields: Iterable[str]) -> Erased:
    """Remove the values and nonces of `fields` (`conversation_key`, `data.<key>`) from a stored
    event, keeping their commitments: its digest, hence the chain, is unchanged."""
    salts, erased, data = dict(event["salts"]), dict(event["erased"]), dict(event["data"])
    key = event[KEY_FIELD]
    for field in fields:
        if field in erased:
            continue
        value = key if field == KEY_FIELD else data.get(field[len(DATA_PREFIX) :])
        erased[field] = _committed(field, value, salts, erased)
        salts.pop(field, None)
        if field == KEY_FIELD:
            key = None
        else:
            data.pop(field[len(DATA_PREFIX) :], None)
    return Erased(
        json.dumps(data, separators=(",", ":")),
        key,
        json.dumps(salts, separators=(",", ":")),
        json.dumps(erased, separators=(",", ":")),
    )


# -- reading stored events back -----------------------------------------------------------------

# what each backend selects for a chain's events, in this order (`stored_event` reads it)
TRAIL_COLUMNS = (
    "seq, ts, agent, kind, action, conversation_key, run_id, daemon, data, salts, erased, prev_hash, hash"
)


def stored_event(row: Sequence[Any]) -> dict[str, Any]:
    """A row of TRAIL_COLUMNS as the verifier reads it. Nothing here trusts the row: JSON that no longer
    parses is kept as text (it then fails its hash, as any edit does), a missing hash reads as ""."""
    seq, ts, agent, kind, action, key, run_id, daemon, data, salts, erased, prev, digest = row
    return {
        "seq": seq,
        "ts": ts,
        "agent": agent,
        "kind": kind,
        "action": action,
        KEY_FIELD: key,
        "run_id": run_id,
        "daemon": daemon,
        "data": _object(data),
        "salts": _object(salts),
        "erased": _object(erased),
        "prev_hash": hex_of(prev),
        "hash": hex_of(digest),
    }


# what each backend selects for the listing of events (AuditEvents), in this order (`listed_event` reads it)
EVENT_COLUMNS = "id, ts, agent, kind, action, conversation_key, run_id, data, daemon, seq, prev_hash, hash"
_EVENT_NAMES = tuple(EVENT_COLUMNS.split(", "))


def listed_event(row: Sequence[Any]) -> dict[str, Any]:
    """A row of EVENT_COLUMNS as `agentd audit` and the inspector list it: data parsed, hashes in hex."""
    event = dict(zip(_EVENT_NAMES, row, strict=True))
    event["data"] = json.loads(event["data"])
    event["prev_hash"], event["hash"] = hex_of(event["prev_hash"]), hex_of(event["hash"])
    return event


def hex_of(value: bytes | bytearray | memoryview | None) -> str:
    return bytes(value).hex() if isinstance(value, bytes | bytearray | memoryview) else ""


def _object(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {"(not JSON)": text}
    return value if isinstance(value, dict) else {"(not an object)": value}


# -- verifying ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """What walking one chain found. `broken` is the seq of the first event that does not verify (or
    that is missing) with `reason`; `last` the seq and hash the walk ended on; `head` what the store's
    chain head records (None: no event was ever appended)."""

    chain: str
    events: int
    first: int | None
    last: tuple[int, str] | None
    head: tuple[int, str] | None
    broken: int | None = None
    reason: str | None = None
    unreadable: str | None = None  # the chain could not be read at all (why)

    @property
    def ok(self) -> bool:
        return self.broken is None and self.unreadable is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "ok": self.ok,
            "events": self.events,
            "first_seq": self.first,
            "head": None if self.last is None else {"seq": self.last[0], "hash": self.last[1]},
            "broken_at": self.broken,
            "reason": self.reason or self.unreadable,
        }


class ChainWalk:
    """Checks a chain's events one at a time, in seq order (`feed`), then against its head (`end`).

    A walk that starts from event 1 expects the genesis hash before it; one that starts later (an
    export `--since`) takes the first event's recorded `prev_hash` as given.
    """

    def __init__(self, chain: str, *, from_start: bool = True):
        self.chain = chain
        self._from_start = from_start
        self._seq = 0
        self._prev = GENESIS
        self._first: int | None = None
        self._events = 0
        self.broken: int | None = None
        self.reason: str | None = None

    def feed(self, event: Mapping[str, Any]) -> bool:
        """Check the next event; False (and `broken`, `reason` set) at the first that does not verify."""
        if self.broken is not None:
            return False
        seq = event["seq"]
        if self._first is None:
            self._first = seq
            if not self._from_start:
                self._seq, self._prev = seq - 1, bytes.fromhex(event["prev_hash"])
        if seq != self._seq + 1:
            missing = self._seq + 1
            if seq > missing:
                return self._break(missing, f"event {missing} is missing (the next stored is {seq})")
            return self._break(seq, f"event {seq} appears again after event {self._seq}")
        if bytes.fromhex(event["prev_hash"]) != self._prev:
            return self._break(seq, f"event {seq} does not name event {seq - 1}'s hash as the one before it")
        try:
            digest = digest_of(event)
        except (Unverifiable, KeyError, ValueError, TypeError) as e:
            return self._break(seq, f"event {seq} cannot be hashed: {e}")
        computed = link(self._prev, seq, digest)
        if computed.hex() != event["hash"]:
            return self._break(seq, f"event {seq}'s content does not match its hash (it was changed)")
        self._seq, self._prev = seq, computed
        self._events += 1
        return True

    def _break(self, seq: int, reason: str) -> bool:
        self.broken, self.reason = seq, reason
        return False

    def end(self, head: tuple[int, str] | None) -> Verdict:
        """The verdict, checking where the walk ended against the chain head the store records."""
        if self.broken is None and head is not None:
            seq, digest = head
            if self._seq < seq:
                self._break(
                    self._seq + 1, f"the chain head records {seq} events; the trail ends at {self._seq}"
                )
            elif self._seq > seq:
                self._break(
                    seq + 1, f"event {seq + 1} is past the chain head ({seq}): it was added outside agentd"
                )
            elif self._prev.hex() != digest:
                self._break(seq, f"the chain head's hash for event {seq} is not the one computed")
        if self.broken is None and head is None and self._events:
            self._break(1, "the store has events but no chain head")
        last = (self._seq, self._prev.hex()) if self._seq else None
        return Verdict(self.chain, self._events, self._first, last, head, self.broken, self.reason)


def verify_chain(chain: str, events: Iterable[Mapping[str, Any]], head: tuple[int, str] | None) -> Verdict:
    walk = ChainWalk(chain)
    for event in events:
        if not walk.feed(event):
            break
    return walk.end(head)
