"""Paused runs waiting for a person: each holds its conversation until it is decided or expires.

A run that paused for an approval keeps its conversation's lock (its place in
the conversation's order): later messages of that conversation wait behind it,
in order. The waiting is not work in flight (draining does not wait for a
person), only the resumed run is. An approver answers out of band — `/approve`
and `/deny` never queue behind the very lock the paused run holds — and the
waiting run resumes at once: it runs the call (or reads the refusal), finishes
the turn and commits it.

Where the resumed run's reply goes: to the approver's request when they
answered in the same conversation (their reply is the answer); otherwise to
the conversation's channel when it can post there (Discord, Slack, Telegram),
and to the approver's request when it cannot (the webhook's original request
is long gone). An expired request is answered the same way, in the
conversation.

Pending approvals survive a restart: at open, each open approval takes its
conversation's lock again before any message can, and waits (or resumes at
once when it was decided, or expired, while the daemon was down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.engine.lifecycle import Lifecycle
from agentd.engine.pausing import TurnResult
from agentd.engine.progress import Decision
from agentd.engine.state import AgentState
from agentd.engine.stop_request import STOP_WAIT_S, Stop
from agentd.events import Reply
from agentd.store.queries import ApprovalById, OpenApprovals
from agentd.store.records import ApprovalRecord, AuditRecord
from agentd.store.writes import AppendAudit, DecideApproval, RowMissing, Write
from agentd.tools.redaction import describe_args

log = logging.getLogger(__name__)
OPERATOR = "http"  # who decides through the HTTP API: whoever holds the daemon's token
Resume = Callable[[ApprovalRecord, Decision], Awaitable[TurnResult]]
Release = Callable[[], None]
STOPPED_BY = "stop"  # who ended an approval with a stop that names nobody (an anonymous /stop)


@dataclass
class Waiting:
    record: ApprovalRecord
    decided: asyncio.Future[Decision]
    finished: asyncio.Future[Reply]  # the resumed run's reply
    answer_in_place: bool = False  # the approver asked in the conversation itself: their reply is the answer
    posted: bool = False  # the resumed reply went to the conversation's channel
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a decision did: `status` approved | refused | not_allowed | unknown | closed; the reply."""

    status: str
    reply_text: str
    record: ApprovalRecord | None = None
    resumed: Reply | None = None


class Approvals:
    def __init__(self, state: AgentState, lifecycle: Lifecycle, resume: Resume):
        self._state = state
        self._lifecycle = lifecycle
        self._resume = resume
        self._waiting: dict[str, Waiting] = {}

    # -- what /status and the API show ---------------------------------------------------------

    def pending_in(self, conversation_key: str) -> list[ApprovalRecord]:
        return [w.record for w in self._waiting.values() if w.record.conversation_key == conversation_key]

    # -- waiting ---------------------------------------------------------------------------------

    def hold(self, record: ApprovalRecord, release: Release, decided: Decision | None = None) -> Waiting:
        """Wait for `record`'s decision holding its conversation (`release` gives the conversation back)."""
        loop = asyncio.get_running_loop()
        waiting = Waiting(record, loop.create_future(), loop.create_future())
        if decided is not None:
            waiting.decided.set_result(decided)
        self._waiting[record.id] = waiting
        self._state.waiting_approvals[record.id] = record
        waiting.task = loop.create_task(self._wait(waiting, release))
        return waiting

    async def recover(self) -> int:
        """At open: every approval whose run was not resumed takes its conversation again; returns how many."""
        records = await self._state.store.read(OpenApprovals())
        for record in records:
            release = await self._state.locks.acquire(record.conversation_key)
            decided = None
            if record.status != "pending":  # decided (or expired) just before a stop
                decided = Decision(record.status, record.decided_by, record.id)
            self.hold(record, release, decided)
        return len(records)

    async def _wait(self, waiting: Waiting, release: Release) -> None:
        record, handed_over = waiting.record, False
        try:
            try:
                left = max(record.expires_at - time.time(), 0.0)
                decision = await asyncio.wait_for(asyncio.shield(waiting.decided), left)
            except TimeoutError:
                decision = await self._expire(waiting)
            with self._lifecycle.busy():
                result = await self._resume(record, decision)
                if result.paused is not None:  # the resumed run asks again: the new request keeps the place
                    self.hold(result.paused, release)
                    handed_over = True
                if not waiting.answer_in_place:
                    waiting.posted = await self._state.resources.outbox.post(
                        self._state.name, record.conversation_key, result.reply.text
                    )
            waiting.finished.set_result(result.reply)
        except asyncio.CancelledError:
            if not waiting.finished.done():
                waiting.finished.cancel()
            raise  # the agent stops: the approval stays open in the store and waits again after a restart
        except Exception as e:
            log.exception("agent %s: resuming the run of approval %s failed", self._state.name, record.id)
            if not waiting.finished.done():
                waiting.finished.set_exception(e)
        finally:
            self._waiting.pop(record.id, None)
            self._state.waiting_approvals.pop(record.id, None)
            if not handed_over:
                release()

    async def _expire(self, waiting: Waiting) -> Decision:
        record, now = waiting.record, time.time()
        audit = _decision_audit(record, "expired", None, self._state.spec.tools.audit_args)
        try:
            await self._state.store.write(
                DecideApproval(record.id, "expired", None, now), AppendAudit(self._state.name, [audit], now)
            )
        except RowMissing:
            return await waiting.decided  # decided at the same moment: that decision stands
        decision = Decision("expired", None, record.id)
        if not waiting.decided.done():
            waiting.decided.set_result(decision)
        return decision

    async def close(self) -> None:
        """The agent stops: stop waiting (open approvals stay in the store for the next start)."""
        tasks = [w.task for w in self._waiting.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def end_for_stop(self, conversation_key: str, stop: Stop) -> str | None:
        """/stop while the conversation's run waits for an approval: the approval is closed (stored as
        expired, decided by whoever stopped it; audited `tool/cancelled`) and the run resumed as a
        stopped one (its call answered "not finished", the run `stopped`), the conversation free
        again once that is committed (waited for, bounded). The run's id; None when none waits here."""
        for waiting in list(self._waiting.values()):
            record = waiting.record
            if record.conversation_key != conversation_key or waiting.decided.done():
                continue
            now, by = time.time(), stop.by or STOPPED_BY
            audit = _decision_audit(record, "cancelled", by, self._state.spec.tools.audit_args)
            audit.data["reason"] = f"stopped ({stop.reason})"
            try:
                await self._state.store.write(
                    DecideApproval(record.id, "expired", by, now), AppendAudit(self._state.name, [audit], now)
                )
            except RowMissing:
                continue  # decided at the same moment: that decision stands
            waiting.answer_in_place = True  # the stop's own answer says it
            waiting.decided.set_result(Decision("expired", by, record.id, stop=stop))
            with contextlib.suppress(Exception):  # (a resume that failed is logged by _wait)
                await asyncio.wait_for(asyncio.shield(waiting.finished), STOP_WAIT_S)
            return record.run_id
        return None

    # -- deciding -------------------------------------------------------------------------------

    async def store_write(self, *ops: Write[Any]) -> None:
        await self._state.store.write(*ops)

    async def _may_answer(self, record: ApprovalRecord, approver: str) -> bool:
        """The operator; a named approver (tools.approvers); else the person who asked, as they are
        now: any account linked into them when they answer (one linked since the request too, one
        unlinked since no more), or the account that asked."""
        if approver == OPERATOR:
            return True
        if self._state.spec.tools.approvers:
            return approver in record.approvers
        if approver == record.requested_by:
            return True
        linked = await self._state.resources.people.of(approver)
        return linked is not None and record.requested_by in linked.accounts

    async def decide(
        self,
        approval_id: str,
        approve: bool,
        approver: str,
        *,
        from_conversation: str | None = None,
        also: tuple[Write[Any], ...] = (),
    ) -> Outcome:
        """Answer an approval; waits for the resumed run. `approver` is `<channel>:<user id>` (or
        OPERATOR); `also` is committed with the decision (the /approve message's delivery id)."""
        waiting = self._waiting.get(approval_id)
        if waiting is None or waiting.decided.done():
            return await self._not_waiting(approval_id, also)
        record, now = waiting.record, time.time()
        status = "approved" if approve else "refused"
        mode = self._state.spec.tools.audit_args
        if not await self._may_answer(record, approver):
            audit = AuditRecord(
                "permission",
                "denied",
                record.conversation_key,
                record.run_id,
                {
                    "approval": record.id,
                    "tool": record.tool,
                    "by": approver,
                    "decision": status,
                    "reason": "not an approver",
                },
            )
            await self._state.store.write(AppendAudit(self._state.name, [audit], now), *also)
            who = (
                ", ".join(record.approvers)
                if self._state.spec.tools.approvers
                else f"the person who asked ({record.requested_by}, or an account linked to it)"
            )
            text = f"You cannot answer approval [{record.id}]: only {who} can."
            return Outcome("not_allowed", text, record)
        try:
            await self._state.store.write(
                DecideApproval(record.id, status, approver, now),
                AppendAudit(self._state.name, [_decision_audit(record, status, approver, mode)], now),
                *also,
            )
        except RowMissing:
            return await self._not_waiting(approval_id, also)
        waiting.answer_in_place = from_conversation == record.conversation_key
        waiting.decided.set_result(Decision(status, approver, record.id))
        reply = await asyncio.shield(waiting.finished)
        if waiting.answer_in_place:
            return Outcome(status, reply.text, record, reply)
        verb = "Approved" if approve else "Refused"
        text = f"{verb} [{record.id}] ({record.tool} in {record.conversation_key})."
        if not waiting.posted:  # the conversation's channel cannot be posted to: the answer comes here
            text += f"\nThe run's answer:\n{reply.text}"
        return Outcome(status, text, record, reply)

    async def _not_waiting(self, approval_id: str, also: tuple[Write[Any], ...]) -> Outcome:
        if also:
            await self._state.store.write(*also)
        record = await self._state.store.read(ApprovalById(approval_id))
        if record is None:
            return Outcome("unknown", f"There is no approval [{approval_id}].")
        if record.status == "expired" and record.decided_by is not None:  # (only a stop decides an expiry)
            return Outcome("closed", f"Approval [{approval_id}] is gone: /stop ended its run.", record)
        return Outcome("closed", f"Approval [{approval_id}] was already {record.status}.", record)


def _decision_audit(record: ApprovalRecord, status: str, by: str | None, mode: str) -> AuditRecord:
    """approved | refused | expired: who decided, after how long; the arguments as the request showed
    them (never more than redacted) unless audit_args is none."""
    event = (record.state or {}).get("event", {})
    data: dict[str, Any] = {
        "tool": record.tool,
        "server": record.server,
        "user": event.get("user_id"),
        "approval": record.id,
        "by": by,
        "requested_by": record.requested_by,
        "waited_ms": round((time.time() - record.created_at) * 1000),
    }
    if mode != "none":
        data["args"] = record.shown_args
    return AuditRecord("tool", status, record.conversation_key, record.run_id, data)


def describe_pending(record: ApprovalRecord, now: float) -> dict[str, Any]:
    """An open approval as /status, GET …/status and GET …/approvals show it."""
    return {
        "id": record.id,
        "conversation_key": record.conversation_key,
        "tool": record.tool,
        "server": record.server,
        "args": record.shown_args,
        "summary": f"{record.tool} {describe_args(record.shown_args, 200)}",
        "requested_by": record.requested_by,
        "approvers": record.approvers,
        "status": record.status,
        "expires_in_s": max(0, round(record.expires_at - now)),
    }
