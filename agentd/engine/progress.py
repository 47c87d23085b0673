"""A message run in progress: what it has done so far, and that state as JSON.

A run that needs a person's approval pauses with everything it has done so
far (the person's message, the assistant's tool-call messages, the tool
results already made, its token counts) saved beside the approval, so it can
be resumed where it stopped, in this process or after a restart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentd.engine.stop_request import Stop
from agentd.events import InboundEvent
from agentd.messages import MESSAGE_ADAPTER, Message, ToolCallPart, ToolResultPart
from agentd.store.records import AuditRecord, RunRecord
from agentd.store.writes import Delivery


@dataclass(frozen=True, slots=True)
class Decision:
    """How a paused run's approval was answered: approved | refused | expired, by whom; or `stop`
    set: a /stop ended the wait (the run ends stopped, its call not run)."""

    status: str
    by: str | None
    approval: str
    stop: Stop | None = None


@dataclass
class ToolBatch:
    """The tool calls of one assistant message, and the answers made so far, in order."""

    calls: list[ToolCallPart]
    results: list[ToolResultPart] = field(default_factory=list)

    @property
    def next_call(self) -> ToolCallPart | None:
        return self.calls[len(self.results)] if len(self.results) < len(self.calls) else None

    def message(self) -> Message:
        return Message(role="tool", parts=tuple(self.results))


@dataclass
class TurnProgress:
    event: InboundEvent
    run: RunRecord
    new: list[Message]
    steps: int = 0
    batch: ToolBatch | None = None  # the calls being answered when the run paused
    audit: list[AuditRecord] = field(default_factory=list)  # not committed yet
    # busy: collect — the other messages this run answers, whose deliveries its commit records
    delivered: list[Delivery] = field(default_factory=list)

    def to_state(self) -> dict[str, Any]:
        e = self.event
        return {
            "event": {
                "agent": e.agent,
                "conversation_key": e.conversation_key,
                "text": e.text,
                "channel": e.channel,
                "user_id": e.user_id,
                "sent_at": e.sent_at,
            },
            "run": asdict(self.run),
            "new": [MESSAGE_ADAPTER.dump_python(m, mode="json", exclude_none=True) for m in self.new],
            "steps": self.steps,
            "batch": None
            if self.batch is None
            else {
                "calls": [c.model_dump(mode="json") for c in self.batch.calls],
                "results": [r.model_dump(mode="json") for r in self.batch.results],
            },
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TurnProgress:
        # the delivery was recorded when the run paused: a resumed run records none
        event = InboundEvent(**state["event"])
        batch = state.get("batch")
        return cls(
            event=event,
            run=RunRecord(**state["run"]),
            new=[MESSAGE_ADAPTER.validate_python(m) for m in state["new"]],
            steps=int(state["steps"]),
            batch=None
            if batch is None
            else ToolBatch(
                [ToolCallPart.model_validate(c) for c in batch["calls"]],
                [ToolResultPart.model_validate(r) for r in batch["results"]],
            ),
        )
