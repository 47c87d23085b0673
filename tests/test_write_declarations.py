"""What a write declares about itself, and the guards for what no declaration can say.

Two facts about a write are read from its fields (agentd/store/declarations.py), not from lists kept
beside them: the store records the writing daemon on a write with a `daemon` field (and on a run row
it carries), and agentd/memory/screening.py screens the fields declared as memory text (or what a
write's own `screened` screens). A write with text that declares neither must be listed here as
exempt, with the reason: a miss would store a secret unredacted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_type_hints

from agentd.memory.screening import SecretScreen
from agentd.store import writes
from agentd.store.declarations import memory_text_fields
from agentd.store.records import LayerState, NewEpisode, RunRecord
from agentd.store.writes import (
    AppendAudit,
    ApplyCompaction,
    CommitTurn,
    InsertEpisodes,
    InsertRun,
    PutLayerState,
    UpsertFact,
    UpsertMemory,
    Write,
    stamped,
)

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6"  # what the openai_key detector finds

# Writes holding text that is not memory text, and why it needs no screening here.
EXEMPT: Mapping[str, str] = {
    "EnsureIdentity": "the agent's name and creation time, set by agentd itself",
    "CommitTurn": "a turn's transcript: screened by the turn (engine/turn.py) under transcripts.redact_secrets",
    "InsertRun": "a run row: ids, model names, counts and an error message agentd wrote",
    "AppendAudit": "audit events: ids and counts; tool arguments in them are the redacted shown_args",
    "RecordDelivery": "a platform delivery's channel, event id and conversation key",
    "StoreMedia": "a person's files as sent (bytes, names, types): kept like their messages, erased with them",
    "InsertApproval": "an approval's arguments as called (the approved call runs with them) and shown redacted",
    "DecideApproval": "an approval id, a status and who decided",
    "CloseApproval": "an approval id",
    "DeleteConversation": "deletes; its audit row holds counts and who asked",
    "DeleteMemory": "deletes a key",
    "DeleteFact": "deletes a key",
    "SetVectors": "an embedder's name and vectors",
    "PruneEpisodes": "deletes; its audit row holds counts",
    "DeletePartitionEpisodes": "deletes; its audit row holds counts and who asked",
    "ErasePerson": "erases; its audit row holds counts and a salted hash of the person",
}


def write_kinds() -> list[type]:
    return [
        obj
        for obj in vars(writes).values()
        if isinstance(obj, type)
        and issubclass(obj, Write)
        and obj is not Write
        and dataclasses.is_dataclass(obj)
    ]


def carries_text(hint: Any) -> bool:
    """Whether a field of this type can hold a string: str itself, or inside a container or a record."""
    if hint is str:
        return True
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return any(carries_text(h) for h in get_type_hints(hint).values())
    return any(carries_text(arg) for arg in get_args(hint))


def test_every_write_with_text_is_screened_or_exempt_with_a_reason() -> None:
    kinds = write_kinds()
    assert len(kinds) > 20
    with_text = [k for k in kinds if any(carries_text(h) for h in get_type_hints(k).values())]
    screened = {k.__name__ for k in kinds if memory_text_fields(k) or hasattr(k, "screened")}
    assert screened == {"ApplyCompaction", "PutLayerState", "UpsertMemory", "UpsertFact", "InsertEpisodes"}
    assert sorted(k.__name__ for k in with_text if k.__name__ not in screened | set(EXEMPT)) == []
    assert sorted(set(EXEMPT) - {k.__name__ for k in with_text}) == []  # (no stale exemption)
    assert sorted(set(EXEMPT) & screened) == []
    assert all(reason.strip() for reason in EXEMPT.values())


def test_each_declared_field_is_screened() -> None:
    """What the declarations say is what `SecretScreen.op` does, one write at a time."""
    screen = SecretScreen("redact")
    memory = screen.op(UpsertMemory("", "k", f"key {KEY}", None, 1.0))
    fact = screen.op(UpsertFact("user:1", "k", KEY, 0.9, f"said {KEY}", None, 1.0))
    compaction = screen.op(ApplyCompaction(1, 4, f"summary {KEY}", "r1", 1.0))
    episodes = screen.op(InsertEpisodes([NewEpisode("user:1", "c", f"spoke {KEY}", 1.0)]))
    layer = screen.op(PutLayerState(1, "state", LayerState({"sigma": [f"note {KEY}"]}, 3), 1.0))
    assert isinstance(memory, UpsertMemory) and memory.value == "key [REDACTED:openai_key]"
    assert isinstance(fact, UpsertFact)
    assert (fact.value, fact.source) == ("[REDACTED:openai_key]", "said [REDACTED:openai_key]")
    assert isinstance(compaction, ApplyCompaction) and compaction.summary == "summary [REDACTED:openai_key]"
    assert isinstance(episodes, InsertEpisodes) and episodes.episodes[0].text == "spoke [REDACTED:openai_key]"
    assert isinstance(layer, PutLayerState) and layer.state.data == {"sigma": ["note [REDACTED:openai_key]"]}
    assert sorted(screen.found) == [
        ("compaction", "openai_key"),
        ("episode", "openai_key"),
        ("fact", "openai_key"),
        ("layer:state", "openai_key"),
        ("memory", "openai_key"),
    ]
    untouched = AppendAudit("bot", [], 1.0)
    assert screen.op(untouched) is untouched


@dataclass(frozen=True, slots=True)
class NewKindOfAudit(Write[None]):
    """A write added later that appends an audit row: it declares that with its `daemon` field alone."""

    agent: str
    daemon: str | None = None


def _run() -> RunRecord:
    return RunRecord("r1", "webhook:c", "message", None, "ok", 1.0)


def test_stamped_records_the_daemon_from_the_fields() -> None:
    run, turn_run = _run(), _run()
    turn = CommitTurn("webhook:c", None, [], turn_run, None, None, 1.0)
    ops = [
        NewKindOfAudit("bot"),
        AppendAudit("bot", [], 1.0),
        InsertRun(run),
        turn,
        UpsertMemory("", "k", "v", None, 1.0),
    ]
    out = stamped(ops, "d1")
    assert [getattr(op, "daemon", "-") for op in out] == ["d1", "d1", "-", "-", "-"]
    assert (run.daemon, turn_run.daemon) == ("d1", "d1")  # a run row records it on the record itself
    assert out[2:] == ops[2:]  # (the same ops: only their runs took the daemon)
    assert stamped(ops[:1], None) == ops[:1]  # no daemon to record: as they are
