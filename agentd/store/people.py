"""A person's data, as every backend finds and erases it: who a conversation belongs to, what a
tombstone keeps of a message, which audit fields name someone, how the erased id is recorded.

A person is a user id as the channels give it. Their conversations are those they spoke in: one
where nobody else spoke (a direct message, their own webhook conversation) is *theirs* and goes
whole on erasure, as does one whose key names them (`key_names`) though no message of it was kept; one shared with others (a group channel) keeps its history for the others, with
the person's exchanges — their messages and what the agent answered them, tool steps included —
replaced by tombstones that keep each message's place and shape (a tool call keeps its result).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping
from typing import Any

from agentd.messages import Message, TextPart, ToolCallPart, ToolResultPart, dump_message, load_message
from agentd.store.audit_chain import DATA_PREFIX, KEY_FIELD

TOMBSTONE = "[erased at the sender's request]"
# audit data keys that hold a person: `user`, `user_id` (a user id), `by`, `requested_by`, `approvers`
# (<channel>:<user id>), `scope` and `partition` (user:<user id>)
PERSON_FIELDS = frozenset({"user", "user_id", "by", "requested_by", "approvers", "scope", "partition"})
# the salted hash an erasure records instead of the id (scrypt: slow on purpose, so ids that can be
# enumerated are not cheap to try against it)
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
EVENT_KIND, EVENT_ACTION = "person", "erase"


def partition_of(user_id: str) -> str:
    """The person's partition of episodes and facts, and their scope of persistent memory."""
    return f"user:{user_id}"


def tombstone(message: Message) -> Message:
    """The message with nothing said left: every text, tool argument and result replaced, who sent
    it and when removed; its role and parts stay, so the thread still reads as a conversation."""
    parts: list[TextPart | ToolCallPart | ToolResultPart] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append(TextPart(text=TOMBSTONE))
        elif isinstance(part, ToolCallPart):
            parts.append(part.model_copy(update={"arguments": {}}))
        else:
            parts.append(part.model_copy(update={"content": TOMBSTONE}))
    return Message(role=message.role, parts=tuple(parts))


def tombstone_body(body: str) -> str:
    """A stored message (JSON) as its tombstone."""
    return dump_message(tombstone(load_message(body)))


def names(value: Any, user_id: str) -> bool:
    """Whether a value names the person: their id, `<channel>:<id>`, `user:<id>`, or a list holding one."""
    if isinstance(value, str):
        return value == user_id or value.endswith(":" + user_id)
    if isinstance(value, list):
        return any(names(v, user_id) for v in value)
    return False


def key_names(conversation_key: str | None, user_id: str) -> bool:
    """Whether a conversation key is the person's by its form: a direct message (`discord:dm:<id>`) or a
    conversation kept per person (`…:user:<id>`). Such a conversation is theirs even when no message of
    it was kept (an agent with `scope: none` keeps runs, not transcripts)."""
    return bool(conversation_key) and conversation_key.endswith((f":dm:{user_id}", f":user:{user_id}"))  # type: ignore[union-attr]


def audit_fields(event: Mapping[str, Any], user_id: str, theirs: Collection[str]) -> list[str]:
    """The fields of a stored audit event to erase for the person (none: the event does not concern
    them). An event of one of their own conversations (`theirs`) keeps only what happened and when:
    its conversation key and all its data go. Any other event loses the fields that name them."""
    key, data = event[KEY_FIELD], event["data"]
    if key is not None and key in theirs:
        return [KEY_FIELD, *(DATA_PREFIX + name for name in data)]
    fields = [DATA_PREFIX + name for name in data if name in PERSON_FIELDS and names(data[name], user_id)]
    if fields and key_names(key, user_id):
        fields.insert(0, KEY_FIELD)
    return fields


def may_name(text: str | None, user_id: str) -> bool:
    """A cheap pre-filter over stored JSON text: could it name the person at all?"""
    return text is not None and json.dumps(user_id)[1:-1] in text


def subject_of(user_id: str) -> dict[str, Any]:
    """What an erasure records of whom it erased: a salted scrypt hash, never the id. Whoever holds an
    id can check it against the record (hashlib.scrypt(id, salt=…, n=…, r=…, p=…, dklen=…))."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(user_id.encode("utf-8"), salt=salt, maxmem=64 * 2**20, **SCRYPT)
    return {"scrypt": digest.hex(), "salt": salt.hex(), **{k: v for k, v in SCRYPT.items() if k != "dklen"}}


def is_subject(user_id: str, subject: Mapping[str, Any]) -> bool:
    digest = hashlib.scrypt(
        user_id.encode("utf-8"),
        salt=bytes.fromhex(subject["salt"]),
        n=subject["n"],
        r=subject["r"],
        p=subject["p"],
        dklen=SCRYPT["dklen"],
        maxmem=64 * 2**20,
    )
    return digest.hex() == subject["scrypt"]


def counts_of(found: Mapping[str, int]) -> dict[str, int]:
    """The counts worth recording: the kinds of which something was erased."""
    return {kind: n for kind, n in found.items() if n}
