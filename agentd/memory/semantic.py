"""semantic — facts about the person speaking, extracted after each run and shown every turn.

After a run (settle) a model reads the new exchange(s) with the strategy's
`extractor` as its instruction and answers with facts in a strict JSON
contract (EXTRACTION_CONTRACT). They upsert by key into the speaker's
partition (speaker_partition of the person's message): one row per key, the
newer value wins, created_at is kept and updated_at set; a null value
retracts a fact. Each turn the current speaker's newest facts go into a system
section; nothing else is replayed (pair it with `window` in a composite for
recency). Another person's facts are never read, shown or written.

Faults: an answer that breaks the contract is refused whole, audited
{kind: extraction, action: refused, data: {reason}}, and the cursor moves on
(nothing stored). A call that failed for now (unreachable, 5xx/429 after
retries, a config problem) keeps the cursor: the same exchanges are extracted
at the next settle. Without a model nothing is extracted and the run log says
so. Facts, cursor, run row and audit rows commit in one transaction.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agentd.config.models import MemorySpec
from agentd.config.strategies import SemanticStrategy
from agentd.errors import OperatorError, ProviderError
from agentd.memory.base import MemoryContext, MemoryView, TurnInput, linked_partitions, speaker_partition
from agentd.memory.cursor import after_cursor, cursor_behind, layer_state
from agentd.memory.erasure import Erasure
from agentd.memory.patches import TOOL_RESULT_CHARS, AnswerRefused, parse_json_answer, rejected_request
from agentd.memory.runs import commit_memory_run, structured_model
from agentd.messages import Message, render_transcript
from agentd.providers.remembered import remembered_block
from agentd.store.queries import Facts
from agentd.store.records import AuditRecord, Fact, LayerState, RunRecord, StoredMessage, StoredThread
from agentd.store.writes import DeleteFact, UpsertFact, Write

log = logging.getLogger(__name__)

AUDIT_KIND = "extraction"
SHOWN_FACTS = 50  # newest facts of the speaker given to the model each turn (and to the extractor)
MAX_FACTS = 20  # per answer; more is not "durable facts" but a transcript in disguise
VALUE_CHARS = 500
SOURCE_CHARS = 200
KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_.]{0,63}$")
FACTS_HEADING = (
    "Facts remembered about the person you are talking with, from earlier exchanges "
    "(newest first; they may be out of date)."
)

EXTRACTION_CONTRACT = """\
Answer with one JSON object and nothing else, in exactly this shape:
{"facts": [{"key": "preferred_editor", "value": "vim", "confidence": 0.9, "source": "I always use vim"}]}
- key: a short snake_case name for what the fact is about; reuse a known key to update its fact.
- value: the fact as short text (at most 500 characters), or null when the person said a known \
fact no longer holds.
- confidence: a number from 0 to 1, how sure the exchange makes you.
- source: the person's words the fact comes from, quoted briefly.
Only facts about the person (the "user" lines); answer {"facts": []} when there are none."""

NO_MODEL_NOTE = (
    "semantic memory has no model to extract facts with (set memory.strategy.model, or "
    "memory_extractor_model in agentd.yaml): nothing is extracted"
)


@dataclass(frozen=True, slots=True)
class ExtractedFact:
    key: str
    value: str | None  # None: retract the fact
    confidence: float
    source: str | None


def parse_facts(answer: str) -> list[ExtractedFact]:
    """The facts of an extraction answer; AnswerRefused (whole answer) when it breaks the contract.

    A key repeated in one answer keeps its last occurrence.
    """
    body = parse_json_answer(answer)
    if not isinstance(body, dict) or set(body) != {"facts"} or not isinstance(body["facts"], list):
        raise AnswerRefused('the answer must be a JSON object {"facts": [...]} and nothing else')
    items = body["facts"]
    if len(items) > MAX_FACTS:
        raise AnswerRefused(f"{len(items)} facts in one answer; at most {MAX_FACTS}")
    facts: dict[str, ExtractedFact] = {}
    for i, item in enumerate(items):
        fact = _fact(item, i)
        facts.pop(fact.key, None)
        facts[fact.key] = fact
    return list(facts.values())


def _fact(item: Any, i: int) -> ExtractedFact:
    where = f"fact {i + 1}"
    if not isinstance(item, dict):
        raise AnswerRefused(f"{where} is not an object")
    unknown = set(item) - {"key", "value", "confidence", "source"}
    if unknown:
        raise AnswerRefused(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
    key = item.get("key")
    if not isinstance(key, str):
        raise AnswerRefused(f"{where} has no key")
    key = re.sub(r"[\s\-]+", "_", key.strip().lower())
    if not KEY_RE.match(key):
        raise AnswerRefused(f"{where}: key {item['key']!r} is not a short snake_case name")
    if "value" not in item:
        raise AnswerRefused(f"{where} ({key}) has no value")
    value = item["value"]
    if isinstance(value, bool) or isinstance(value, int | float):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    if value is not None:
        if not isinstance(value, str) or not value.strip():
            raise AnswerRefused(f"{where} ({key}): the value must be non-empty text or null")
        if len(value) > VALUE_CHARS:
            raise AnswerRefused(f"{where} ({key}): the value is over {VALUE_CHARS} characters")
        value = value.strip()
    confidence = item.get("confidence")
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
        or not 0 <= confidence <= 1
    ):
        raise AnswerRefused(f"{where} ({key}): confidence must be a number from 0 to 1")
    source = item.get("source")
    if source is not None and not isinstance(source, str):
        raise AnswerRefused(f"{where} ({key}): source must be text")
    source = source.strip()[:SOURCE_CHARS] if source else ""
    return ExtractedFact(key, value, float(confidence), source or None)


def facts_section(facts: Sequence[Fact]) -> str:
    lines = [f"- {f.key}: {f.value} (confidence {f.confidence:.2g})" for f in facts]
    return remembered_block("facts", FACTS_HEADING, "\n".join(lines))


def newest_per_key(facts: Sequence[Fact]) -> list[Fact]:
    """One fact per key (the one updated last), the most recently updated first."""
    newest: dict[str, Fact] = {}
    for fact in sorted(facts, key=lambda f: f.updated_at, reverse=True):
        newest.setdefault(fact.key, fact)
    return list(newest.values())


def speakers(messages: Sequence[StoredMessage], start: int, conversation_key: str) -> list[str]:
    """The partition of each message from `start`: the person whose message began its exchange."""
    user_id: str | None = None
    for m in reversed(messages[:start]):
        if m.message.role == "user":
            user_id = m.message.user_id
            break
    out = []
    for m in messages[start:]:
        if m.message.role == "user":
            user_id = m.message.user_id
        out.append(speaker_partition(conversation_key, user_id))
    return out


def speaker_groups(
    messages: Sequence[StoredMessage], start: int, conversation_key: str
) -> list[tuple[str, list[StoredMessage]]]:
    """Pending messages cut into runs of one speaker, in order (one extraction each)."""
    groups: list[tuple[str, list[StoredMessage]]] = []
    for partition, m in zip(speakers(messages, start, conversation_key), messages[start:], strict=True):
        if groups and groups[-1][0] == partition:
            groups[-1][1].append(m)
        else:
            groups.append((partition, [m]))
    return groups


class SemanticMemory:
    """Facts per speaker, extracted after each run; see the module docstring."""

    kind = "semantic"
    # its layer state is only a cursor (the facts are rows of their own, erased by partition)
    LAYER_KEYS: ClassVar[Mapping[str, Erasure]] = {}
    keeps_transcript = True

    def __init__(self, spec: SemanticStrategy, memory: MemorySpec | None = None, layer: str = "semantic"):
        self.spec = spec
        self.layer = layer
        self.instructions = f"{spec.extractor.strip()}\n\n{EXTRACTION_CONTRACT}"

    # -- what the model sees -----------------------------------------------------------

    async def view(self, ctx: MemoryContext, thread: StoredThread, turn: TurnInput) -> MemoryView:
        partition = speaker_partition(turn.conversation_key, turn.user_id)
        facts = await ctx.store.read(Facts(partition, SHOWN_FACTS))
        if turn.user_id and turn.linked:  # one person: their linked accounts' facts too, newest per key
            for other in linked_partitions(turn.linked):
                facts = [*facts, *await ctx.store.read(Facts(other, SHOWN_FACTS))]
            facts = newest_per_key(facts)[:SHOWN_FACTS]
        notes = (NO_MODEL_NOTE,) if structured_model(ctx, self.spec.model) is None else ()
        return MemoryView(system_sections=[facts_section(facts)] if facts else [], notes=notes)

    # -- extraction --------------------------------------------------------------------

    def settle_due(self, thread: StoredThread) -> bool:
        return cursor_behind(thread, self.layer)

    async def settle(self, ctx: MemoryContext, thread: StoredThread, run_id: str | None) -> None:
        if thread.id is None:
            return
        state = await layer_state(ctx, thread, self.layer)
        start = after_cursor(thread.messages, state.upto_seq)
        model = structured_model(ctx, self.spec.model)
        if start == len(thread.messages) or model is None:
            return
        for partition, group in speaker_groups(thread.messages, start, thread.conversation_key):
            if not await self.extract(ctx, thread, partition, group, model, run_id):
                return  # failed for now: the cursor stays before this group

    async def extract(
        self,
        ctx: MemoryContext,
        thread: StoredThread,
        partition: str,
        group: list[StoredMessage],
        model: str,
        parent_run_id: str | None,
    ) -> bool:
        """Extract one speaker's facts from `group`; False when the call must wait for later."""
        key, thread_id = thread.conversation_key, thread.id
        assert thread_id is not None
        upto_seq = group[-1].seq
        known = await ctx.store.read(Facts(partition, SHOWN_FACTS))
        try:
            call = await ctx.call_model(
                trigger="extraction",
                model_ref=model,
                system=self.instructions,
                messages=[Message.user(self.extraction_prompt(known, group))],
                conversation_key=key,
                thread_id=thread_id,
                parent_run_id=parent_run_id,
                purpose="extraction",
            )
        except (ProviderError, OperatorError) as e:
            if not rejected_request(e):
                audit = AuditRecord(AUDIT_KIND, "deferred", key, None, {"error": str(e)})
                await commit_memory_run(ctx, audits=[audit])
                log.warning("agent %s: fact extraction of %s deferred: %s", ctx.agent, key, e)
                return False
            return await self.refuse(ctx, thread, None, f"the provider rejected the request: {e}", upto_seq)
        run = call.run
        try:
            facts = parse_facts(call.completion.message.text)
        except AnswerRefused as refused:
            run.status, run.error = "error", f"extraction refused: {refused.reason}"
            return await self.refuse(ctx, thread, run, refused.reason, upto_seq)
        written = [f.key for f in facts if f.value is not None]
        retracted = [f.key for f in facts if f.value is None]
        audit = AuditRecord(
            AUDIT_KIND,
            "ok",
            key,
            run.id,
            {"partition": partition, "upto_seq": upto_seq, "written": written, "retracted": retracted},
        )

        now = time.time()
        produced: list[Write[Any]] = [
            DeleteFact(partition, f.key)
            if f.value is None
            else UpsertFact(partition, f.key, f.value, f.confidence, f.source, run.id, now)
            for f in facts
        ]
        cursor = (thread, self.layer, LayerState({}, upto_seq))
        await commit_memory_run(ctx, produced=produced, cursor=cursor, runs=[run], audits=[audit])
        return True

    async def refuse(
        self, ctx: MemoryContext, thread: StoredThread, run: RunRecord | None, reason: str, upto_seq: int
    ) -> bool:
        """An answer that cannot be used: audited, nothing stored, the cursor moves past it."""
        audit = AuditRecord(
            AUDIT_KIND, "refused", thread.conversation_key, run.id if run else None, {"reason": reason}
        )
        runs = [run] if run else []
        cursor = (thread, self.layer, LayerState({}, upto_seq))
        await commit_memory_run(ctx, cursor=cursor, runs=runs, audits=[audit])
        log.info("agent %s: fact extraction of %s refused: %s", ctx.agent, thread.conversation_key, reason)
        return True

    def extraction_prompt(self, known: Sequence[Fact], group: Sequence[StoredMessage]) -> str:
        facts = "\n".join(f"- {f.key}: {f.value}" for f in known) or "(none yet)"
        exchange = render_transcript((m.message for m in group), TOOL_RESULT_CHARS)
        return (
            f"Facts already known about this person (reuse a key to update it):\n{facts}\n\n"
            f"The exchange:\n{exchange}"
        )

    # -- the inspector -----------------------------------------------------------------

    async def inspect(self, ctx: MemoryContext, thread: StoredThread) -> dict[str, Any]:
        state = await layer_state(ctx, thread, self.layer)
        key = thread.conversation_key
        partitions = list(
            dict.fromkeys(
                speaker_partition(key, m.message.user_id) for m in thread.messages if m.message.role == "user"
            )
        )

        found = await ctx.store.read_many(*(Facts(p, SHOWN_FACTS) for p in partitions))
        facts: dict[str, list[Fact]] = dict(zip(partitions, found, strict=True))
        return {
            "kind": self.kind,
            "layer": self.layer,
            "model": structured_model(ctx, self.spec.model),
            "upto_seq": state.upto_seq,
            "not_extracted": len(thread.messages) - after_cursor(thread.messages, state.upto_seq),
            "facts": {
                p: [
                    {
                        "key": f.key,
                        "value": f.value,
                        "confidence": f.confidence,
                        "source": f.source,
                        "created_at": f.created_at,
                        "updated_at": f.updated_at,
                    }
                    for f in rows
                ]
                for p, rows in facts.items()
            },
        }
