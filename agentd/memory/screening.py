"""Secrets kept out of memory: `memory.secrets` applied to what a write carries, and audited.

The detectors are in agentd/memory/secrets.py; this module applies a policy to
the text of a batch of writes and says what it found. It runs at one place per
kind of write, the doors every such write already goes through:

- `commit_memory_run` (runs.py): every after-run memory write — facts, Σ and
  summaries (a layer's state), compaction summaries, episodes;
- `store_episodes` (episode_writes.py): an episode's text before it is embedded
  (a remote embedder must not receive the secret either), and the refusal of
  the `save_episode` tool;
- `PersistentMemory.remember`: the `remember` tool;
- the turn's commit (engine/turn.py), for `transcripts.redact_secrets`.

Why not inside the store, at the write ops: the store knows neither the policy
nor whether a model asked for the write (a refusal is a tool error the model
reads); an episode must be clean before it reaches an embedder, which is before
the store; and the hot thread must keep what the store keeps, so the caller
needs the screened copy. The ops that carry memory text are still screened by
one function (`SecretScreen.op`), so a strategy that writes through
`commit_memory_run` is covered with no code of its own. Which ops those are is
declared on the ops themselves (agentd/store/declarations.py: a field made
with `memory_text`, or a `screened` method for text nested in records), so a new
op with memory text is screened once it says so; tests/test_write_declarations.py
fails for a write with text that says neither that nor why it is exempt.

The policy (`memory.secrets`):

- `redact` (default): each secret is replaced by a marker naming its kind
  (`[REDACTED:openai_key]`) and the write goes on;
- `refuse`: a write a model asked for with a tool (`remember`, `save_episode`)
  is not made; the model reads a tool error naming the kinds found. A write
  nobody asked for (after a run: facts, Σ, summaries, compactions, episodes of
  `write: always`) has nobody to refuse: it is redacted as under `redact`.
  Dropping it instead would lose the rest of what it holds, and a summary or a
  fold that is never written would be tried again after every turn;
- `allow`: nothing is looked at.

A persistent key that holds a secret is refused under `redact` as well: a key
is a name (listed in every prompt, written in the audit trail) and a marker
is not a valid one.

Per batch, each (kind of write, detector) found is one audit event `{kind:
memory, action: secret_redacted | secret_refused, data: {detector, write,
count, policy}}`: which detector, in what (`memory`, `memory_key`, `episode`,
`fact`, `compaction`, `layer:<layer>`, `transcript`), how many — never the
value.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentd.errors import ToolError
from agentd.memory.secrets import redact
from agentd.messages import MediaPart, Message, Part, TextPart, ToolCallPart, ToolResultPart
from agentd.store.base import Store
from agentd.store.declarations import memory_text_fields
from agentd.store.records import AuditRecord, LayerState
from agentd.store.writes import AppendAudit, Write

REDACTED, REFUSED = "secret_redacted", "secret_refused"


class SecretScreen:
    """One batch's screening under a policy: redacts (unless `allow`) and counts what it found.

    `tool` names the tool whose call asked for the write (remember, save_episode): only such a
    write can be refused."""

    def __init__(self, policy: str, tool: str | None = None):
        self.policy = policy
        self.tool = tool
        self.found: Counter[tuple[str, str]] = Counter()  # (what was written, detector) -> how many

    @property
    def refuses(self) -> bool:
        """A tool's write holds a secret and the policy is `refuse`."""
        return self.tool is not None and self.policy == "refuse" and bool(self.found)

    def text(self, text: str, write: str) -> str:
        if self.policy == "allow":
            return text
        redacted = redact(text)
        for detector, count in redacted.found.items():
            self.found[(write, detector)] += count
        return redacted.text

    def value(self, value: Any, write: str) -> Any:
        """A JSON-like value with every string screened (and a number that is a card number)."""
        if isinstance(value, str):
            return self.text(value, write)
        if isinstance(value, dict):
            return {k: self.value(v, write) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, write) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            screened = self.text(str(value), write)
            return value if screened == str(value) else screened
        return value

    def layer_state(self, state: LayerState, layer: str) -> LayerState:
        data = self.value(state.data, f"layer:{layer}")
        return state if data == state.data else replace(state, data=data)

    def op(self, op: Write[Any]) -> Write[Any]:
        """The write with the memory text it carries screened (other writes as they are): the fields
        it declares as memory text, or what its own `screened` screens."""
        screened = getattr(op, "screened", None)
        if screened is not None:
            result: Write[Any] = screened(self)
            return result
        changes = {
            name: self.text(value, write)
            for name, write in memory_text_fields(type(op))
            if (value := getattr(op, name)) is not None
        }
        return replace(op, **changes) if changes else op  # type: ignore[type-var]

    def messages(self, messages: Sequence[Message], write: str = "transcript") -> list[Message]:
        """Copies of the messages with every text, tool argument and tool result screened."""
        return [self._message(m, write) for m in messages]

    def _message(self, message: Message, write: str) -> Message:
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                parts.append(part.model_copy(update={"text": self.text(part.text, write)}))
            elif isinstance(part, ToolCallPart):
                parts.append(part.model_copy(update={"arguments": self.value(part.arguments, write)}))
            elif isinstance(part, ToolResultPart):
                parts.append(part.model_copy(update={"content": self.text(part.content, write)}))
            elif isinstance(part, MediaPart):  # a transcript or a document's text can hold a secret too
                screened = None if part.text is None else self.text(part.text, write)
                parts.append(part if screened == part.text else part.model_copy(update={"text": screened}))
        if parts == list(message.parts):
            return message
        return message.model_copy(update={"parts": tuple(parts)})

    def audits(self, action: str, conversation_key: str | None, run_id: str | None) -> list[AuditRecord]:
        """One audit event per (what was written, detector) found: counts, never values."""
        return [
            AuditRecord(
                "memory",
                action,
                conversation_key,
                run_id,
                {"detector": detector, "write": write, "count": count, "policy": self.policy},
            )
            for (write, detector), count in sorted(self.found.items())
        ]

    def note(self) -> str:
        """Said to the model after a tool's write that was redacted ("" when nothing was)."""
        if not self.found:
            return ""
        kinds = ", ".join(sorted({detector for _, detector in self.found}))
        return f" What looked like a secret ({kinds}) was stored as a marker, not as written."

    async def refuse(
        self, store: Store, agent: str, conversation_key: str | None, run_id: str | None
    ) -> ToolError:
        """Audit a tool's refused write (its own commit: nothing else of the call is stored) and
        return the error the model reads."""
        await store.write(AppendAudit(agent, self.audits(REFUSED, conversation_key, run_id), time.time()))
        return self.refusal()

    def refusal(self) -> ToolError:
        """What the model reads when its write was refused: the kinds found, and what to do."""
        kinds = ", ".join(sorted({detector for _, detector in self.found}))
        return ToolError(
            f"{self.tool} refused: what you asked to store holds what looks like a secret ({kinds}), and this "
            "agent keeps secrets out of memory. Nothing was stored. Store it without the secret, or "
            "leave it out."
        )


def transcript_copy(
    messages: Sequence[Message], conversation_key: str, run_id: str
) -> tuple[list[Message], list[AuditRecord]]:
    """A turn's messages as `transcripts.redact_secrets` stores them, and the audit events saying what
    was redacted. A transcript cannot refuse what a person sent: it is always redacted."""
    screen = SecretScreen("redact")
    return screen.messages(messages), screen.audits(REDACTED, conversation_key, run_id)
