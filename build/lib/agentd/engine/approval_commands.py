"""`/approve <id>` and `/deny <id>` in any channel: answered out of band, never behind the paused run.

The approver is whoever sent the command, as `<channel>:<user id>`; one who is
not among the approval's approvers gets a refusal (and a `permission` audit
row). The command's delivery id is committed with the decision, so a platform
redelivery of the command is answered once.
"""

from __future__ import annotations

import re
import time
from typing import Any

from agentd.engine.approvals import Approvals
from agentd.engine.pausing import speaker
from agentd.events import InboundEvent, Reply
from agentd.store.writes import Delivery, RecordDelivery, Write

_APPROVAL_RE = re.compile(r"^/(approve|deny)(?:@\S+)?(?:\s+(\S+))?\s*$", re.IGNORECASE)


def is_approval_command(text: str) -> bool:
    return text.startswith("/") and _APPROVAL_RE.match(text.strip()) is not None


async def answer_approval(approvals: Approvals, event: InboundEvent) -> Reply:
    match = _APPROVAL_RE.match(event.text.strip())
    assert match is not None
    verb, approval_id = match.group(1).lower(), match.group(2)
    key = event.conversation_key
    also: tuple[Write[Any], ...] = ()
    if event.event_id is not None:
        also = (RecordDelivery(Delivery(event.channel, event.event_id, key), None, time.time()),)
    if approval_id is None:
        waiting = approvals.pending_in(key)
        listed = ", ".join(f"[{r.id}] {r.tool}" for r in waiting) or "none in this conversation"
        if also:
            await approvals.store_write(*also)
        return Reply(text=f"Usage: /{verb} <id>. Waiting for approval: {listed}.", conversation_key=key)
    outcome = await approvals.decide(
        approval_id.strip("[]").lower(), verb == "approve", speaker(event), from_conversation=key, also=also
    )
    resumed = outcome.resumed
    return Reply(
        text=outcome.reply_text,
        conversation_key=key,
        run_id=resumed.run_id if resumed is not None else None,
        error=resumed.error if resumed is not None else None,
    )
