"""Pausing a run for a person's approval: the request, saved with the run's progress, and its message.

The approval row, the audit rows of the run so far (its `approval_requested`
included) and the delivery id are committed together; the run's progress is
saved in the row, so the run can be resumed from it in this process or after
a restart. The reply to the message that started the run is the request
itself: which tool, its arguments (redacted), a short id, and how to answer.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from typing import Any

from agentd.engine.conversation import Conversation
from agentd.engine.progress import Decision, TurnProgress
from agentd.engine.state import AgentState
from agentd.engine.tool_gate import ApprovalNeeded, ToolGate, tool_audit
from agentd.events import InboundEvent, Reply
from agentd.store.queries import ApprovalById
from agentd.store.records import ApprovalRecord
from agentd.store.writes import AppendAudit, CloseApproval, Delivery, InsertApproval, RecordDelivery, Write
from agentd.tools.base import ToolCall
from agentd.tools.redaction import audit_args, describe_args


@dataclass(frozen=True, slots=True)
class TurnResult:
    reply: Reply
    paused: ApprovalRecord | None = None  # set when the run waits for a person


def speaker(event: InboundEvent) -> str:
    """Who sent an event, as approvers are named: `<channel>:<user id>` (the conversation when anonymous)."""
    return f"{event.channel}:{event.user_id}" if event.user_id else f"conversation:{event.conversation_key}"


async def pause_run(
    conv: Conversation,
    progress: TurnProgress,
    needed: ApprovalNeeded,
    gate: ToolGate,
    resumed: Decision | None,
) -> TurnResult:
    """Save the run's progress in a new approval request and answer with the request.
    `resumed`: the decision this run was resumed with (its approval closes: the new one waits instead)."""
    state, spec, event, run = conv.agent, conv.spec, progress.event, progress.run
    now = time.time()
    requester = speaker(event)
    record = ApprovalRecord(
        id=await _new_id(state),
        conversation_key=event.conversation_key,
        run_id=run.id,
        tool=needed.call.name,
        server=needed.tool.server,
        args=dict(needed.call.arguments),
        shown_args=audit_args(
            needed.call.arguments, "redacted", needed.tool.private_args, needed.tool.plain_args
        )
        or {},
        requested_by=requester,
        # "the person who asked": from any of their linked accounts
        approvers=list(spec.tools.approvers)
        or [requester, *sorted(set(event.person_accounts) - {requester})],
        created_at=now,
        expires_at=now + spec.tools.approval_timeout_s,
    )
    # from here on the run's progress is the saved one: the delivery below is its only record
    progress.event = replace(event, event_id=None)
    record.state = progress.to_state()
    caller = ToolCall(
        event.conversation_key, run.id, event.user_id, event.sent_at, event.linked_user_ids, who=event.who
    )
    requested = tool_audit(
        "approval_requested",
        needed.call,
        needed.tool,
        caller,
        gate.shown_args(needed.call, needed.tool),
        rule=needed.rule,
        approval=record.id,
        approvers=record.approvers,
    )
    ops: list[Write[Any]] = [
        InsertApproval(record),
        AppendAudit(state.name, [*progress.audit, requested], now),
    ]
    if event.event_id is not None:
        ops.append(
            RecordDelivery(Delivery(event.channel, event.event_id, event.conversation_key), run.id, now)
        )
    ops += [RecordDelivery(d, run.id, now) for d in progress.delivered]  # busy: collect's others
    progress.delivered = []  # recorded: a resumed run records none
    if resumed is not None:
        ops.append(CloseApproval(resumed.approval))  # the run now waits on the new request instead
    await state.store.write(*ops)
    progress.audit.clear()
    text = approval_request_text(record, spec.tools.approvers != [])
    reply = Reply(text=text, conversation_key=event.conversation_key, run_id=run.id, approval=record.id)
    return TurnResult(reply, paused=record)


def approval_request_text(record: ApprovalRecord, named_approvers: bool) -> str:
    minutes = max(1, round((record.expires_at - record.created_at) / 60))
    who = (
        f"approvers: {', '.join(record.approvers)}"
        if named_approvers
        else "only the person who asked can answer"
    )
    return (
        f"Approval needed [{record.id}]: {record.tool} {describe_args(record.shown_args)}\n"
        f"Answer /approve {record.id} or /deny {record.id} ({who}; expires in {minutes} min). "
        "Later messages in this conversation wait until then."
    )


async def _new_id(state: AgentState) -> str:
    while True:
        candidate = secrets.token_hex(3)
        if await state.store.read(ApprovalById(candidate)) is None:
            return candidate
